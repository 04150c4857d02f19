"""Locust load for the conversation task: multi-turn chats, each turn carrying the server's own earlier answers.

    locust -f locustfiles/conversation.py --headless -u 8 -r 8 -t 60s -H http://localhost:8000 --mode stream

Prompts: datasets/data/conversation.jsonl (or --dataset PATH). The suite's options: python -m llmload.loadgen
"""

from llmload.loadgen.user import ConversationUser


class ConversationChatUser(ConversationUser):
    task_name = "conversation"
