"""Locust load for the summarization task: summarise a given text.

    locust -f locustfiles/summarization.py --headless -u 8 -r 8 -t 60s -H http://localhost:8000 --mode stream

Prompts: datasets/data/summarization.jsonl (or --dataset PATH). The suite's options: python -m llmload.loadgen
"""

from llmload.loadgen.user import LLMUser


class SummarizationUser(LLMUser):
    task_name = "summarization"
