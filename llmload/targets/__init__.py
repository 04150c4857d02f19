"""Servers under test: a registry of kinds (:mod:`.registry`) and how they start (:mod:`.base`).

    from llmload.targets import TargetSettings, get_kind, parse_targets, start_target
"""

from llmload.targets.base import RunningTarget, Target, TargetKind, TargetSettings, start_target
from llmload.targets.registry import (ALIASES, DEFAULT_BASELINE, DEFAULT_SERVERS, KINDS, ServerSelection,
                                      choose_servers, get_kind, parse_targets, register, targets_type)

__all__ = ["ALIASES", "DEFAULT_BASELINE", "DEFAULT_SERVERS", "KINDS", "RunningTarget", "ServerSelection", "Target",
           "TargetKind", "TargetSettings", "choose_servers", "get_kind", "parse_targets", "register", "start_target",
           "targets_type"]
