"""Locust load for the synthetic task: prompts of an exact length in the model's tokens.

    locust -f locustfiles/synthetic.py --headless -u 8 -r 8 -t 60s -H http://localhost:8000 --mode stream

Prompts: datasets/data/synthetic.jsonl (python datasets/prepare.py --tasks synthetic --input-len N). Options: python -m llmload.loadgen
"""

from llmload.loadgen.user import LLMUser


class SyntheticUser(LLMUser):
    task_name = "synthetic"
