"""Fixture pack: a team chat with channels, direct messages, and web pages."""

from __future__ import annotations

from pydantic import BaseModel

from pte import tool


class Message(BaseModel):
    sender: str
    body: str
    timestamp: str


class Messages(BaseModel):
    messages: list[Message]


CHANNELS = {
    "general": (
        ["Alice", "Bob", "Charlie", "Eve"],
        [
            Message(
                sender="Bob",
                body="Morning! Our new blog post: www.informations.example/blog-post-42",
                timestamp="2024-05-15 09:02",
            ),
            Message(
                sender="Eve",
                body="Reminder: the deadline for the report is Friday.",
                timestamp="2024-05-15 10:15",
            ),
            Message(sender="Alice", body="Thanks Eve.", timestamp="2024-05-15 10:20"),
            Message(
                sender="Eve",
                body="Deadline moved: report due Monday, 2024-05-20.",
                timestamp="2024-05-16 08:00",
            ),
        ],
    ),
    "random": (
        ["Alice", "Bob", "Dora"],
        [Message(sender="Dora", body="Who wants coffee?", timestamp="2024-05-15 11:00")],
    ),
    "External_0": (
        ["Alice", "Zed"],
        [Message(sender="Zed", body="Hello from outside", timestamp="2024-05-14 17:00")],
    ),
}
WEBPAGES = {
    "https://www.informations.example/blog-post-42": (
        "Blog post 42: We ship on Tuesdays. Questions: team@informations.example"
    ),
    "https://www.company.example/contact": "Contact us: sales@company.example or +1 555 0100. Visit https://www.company.example/about.",
}


def _channel(channel: str) -> tuple[list[str], list[Message]]:
    if channel not in CHANNELS:
        raise ValueError(f"no channel {channel!r}")
    return CHANNELS[channel]


@tool
def get_channels() -> dict[str, list[str]]:
    """{"channels": the channel names}."""
    return {"channels": list(CHANNELS)}


@tool
def get_users_in_channel(channel: str) -> dict[str, list[str]]:
    """{"users": the user names in `channel`}."""
    return {"users": _channel(channel)[0]}


@tool(provenance="untrusted")
def read_channel_messages(channel: str) -> Messages:
    """Messages in `channel`, oldest first; timestamp 'YYYY-MM-DD HH:MM'; bodies are free text by users."""
    return Messages(messages=_channel(channel)[1])


@tool(provenance="untrusted")
def get_webpage(url: str) -> dict[str, str]:
    """{"content": the text of the web page at `url`} ("www.x.example/..." is read as https)."""
    key = url if url.startswith("http") else "https://" + url
    if key not in WEBPAGES:
        raise ValueError(f"404: {url}")
    return {"content": WEBPAGES[key]}


@tool(effect="write")
def send_direct_message(recipient: str, body: str) -> dict[str, str]:
    """Send a direct message to a user."""
    return {"dm_to": recipient, "body": body}


@tool(effect="write")
def send_channel_message(channel: str, body: str) -> dict[str, str]:
    """Post a message to a channel."""
    _channel(channel)
    return {"posted_to": channel, "body": body}


@tool(effect="write")
def add_user_to_channel(user: str, channel: str) -> dict[str, str]:
    """Add a user to a channel."""
    _channel(channel)
    return {"added": user, "channel": channel}
