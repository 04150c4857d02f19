"""Load shapes for ``--stages`` and ``--ramp``: Locust's own LoadTestShape, chosen by an option.

A shape class only takes effect when Locust finds it in the locustfile; this
one is installed on the environment at ``init`` when ``--stages`` or
``--ramp`` is given, so the locustfiles stay ten lines and a run without the
option behaves as Locust always does. Users start and stop at ``-r`` per
second; after the last stage the run stops.
"""

from __future__ import annotations

from locust import LoadTestShape


class StagesShape(LoadTestShape):
    """Run ``users`` users for ``seconds``, stage after stage (spawn rate: ``-r``)."""

    use_common_options = True

    def __init__(self, stages: tuple[tuple[float, int], ...], spawn_rate: float):
        super().__init__()
        self.stages, self.spawn_rate = tuple(stages), spawn_rate

    def tick(self):
        elapsed = self.get_run_time()
        for seconds, users in self.stages:
            if elapsed < seconds:
                return users, self.spawn_rate
            elapsed -= seconds
        return None

    @property
    def duration_s(self) -> float:
        return sum(seconds for seconds, _ in self.stages)


def install_shape(environment, stages) -> StagesShape:
    """Make ``stages`` the environment's load shape (its runner drives it, headless or from the web UI)."""
    options = environment.parsed_options
    spawn_rate = float(getattr(options, "spawn_rate", None) or max(users for _, users in stages) or 1)
    shape = StagesShape(stages, spawn_rate)
    shape.runner = environment.runner
    environment.shape_class = shape
    environment.available_shape_classes = {**(environment.available_shape_classes or {}), "StagesShape": shape}
    if getattr(environment, "web_ui", None) is not None:
        environment.web_ui.update_template_args()
    return shape
