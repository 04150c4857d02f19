"""Locust load for the prefix task: prompts that share a long document (a prefix cache's workload).

    locust -f locustfiles/prefix.py --headless -u 8 -r 8 -t 60s -H http://localhost:8000 --mode stream

Prompts: datasets/data/prefix.jsonl (python datasets/prepare.py --tasks prefix --prefix-len N). Options: python -m llmload.loadgen
"""

from llmload.loadgen.user import LLMUser


class PrefixUser(LLMUser):
    task_name = "prefix"
