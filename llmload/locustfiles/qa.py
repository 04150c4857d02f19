"""Locust load for the qa task: answer a question.

    locust -f locustfiles/qa.py --headless -u 8 -r 8 -t 60s -H http://localhost:8000 --mode stream

Prompts: datasets/data/qa.jsonl (or --dataset PATH). The suite's options: python -m llmload.loadgen
"""

from llmload.loadgen.user import LLMUser


class QAUser(LLMUser):
    task_name = "qa"
