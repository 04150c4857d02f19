"""Locust load for the chat task: conversational prompts.

    locust -f locustfiles/chat.py --headless -u 8 -r 8 -t 60s -H http://localhost:8000 --mode stream

Prompts: datasets/data/chat.jsonl (or --dataset PATH). The suite's options: python -m llmload.loadgen
"""

from llmload.loadgen.user import LLMUser


class ChatUser(LLMUser):
    task_name = "chat"
