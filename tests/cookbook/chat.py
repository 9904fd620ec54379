"""Cookbook: team chat tasks (channels as lists of names, messages with free text, web pages)."""

from __future__ import annotations

from pte.testing.cookbook import Task, ref, step

D = "chat"

TASKS = [
    Task(
        "post_in_channel_by_prefix",
        D,
        "Post 'Hi all' in the channel whose name starts with 'External'.",
        [
            step("ch", "get_channels"),
            step("f", "filter_values", values=ref("ch/channels"), op="starts_with", value="External"),
            step("p", "send_channel_message", channel=ref("f/values/0"), body="Hi all"),
        ],
        expect_outputs={"p": {"posted_to": "External_0", "body": "Hi all"}},
    ),
    Task(
        "forward_linked_page",
        D,
        "Read the web page Bob linked in 'general' and send its content to Alice.",
        [
            step("m", "read_channel_messages", channel="general"),
            step("b", "filter_records", records=ref("m/messages"), field="sender", op="eq", value="Bob"),
            step("u", "extract", text=ref("b/records/0/body"), kind="url"),
            step("w", "get_webpage", url=ref("u/values/0")),
            step("dm", "send_direct_message", recipient="Alice", body=ref("w/content")),
        ],
        expect_outputs={
            "dm": {
                "dm_to": "Alice",
                "body": "Blog post 42: We ship on Tuesdays. Questions: team@informations.example",
            }
        },
    ),
    Task(
        "members_only_in_one_channel",
        D,
        "Who is in 'general' but not in 'random'?",
        [
            step("g", "get_users_in_channel", channel="general"),
            step("r", "get_users_in_channel", channel="random"),
            step("d", "difference", values=ref("g/users"), remove=ref("r/users")),
        ],
        result=ref("d/values"),
        expect_result=["Charlie", "Eve"],
    ),
    Task(
        "messages_per_sender",
        D,
        "How many messages has each person posted in 'general'?",
        [
            step("m", "read_channel_messages", channel="general"),
            step("c", "count_by", items=ref("m/messages"), field="sender"),
        ],
        result=ref("c/groups"),
        expect_result=[{"key": "Eve", "count": 2}, {"key": "Alice", "count": 1}, {"key": "Bob", "count": 1}],
    ),
    Task(
        "latest_message_mentioning",
        D,
        "Send Charlie the most recent message in 'general' that mentions the deadline.",
        [
            step("m", "read_channel_messages", channel="general"),
            step(
                "d",
                "filter_records",
                records=ref("m/messages"),
                field="body",
                op="has_word",
                value="deadline",
                ignore_case=True,
            ),
            step("s", "sort_records", records=ref("d/records"), by="timestamp", descending=True),
            step("f", "first", records=ref("s/records")),
            step("dm", "send_direct_message", recipient="Charlie", body=ref("f/record/body")),
        ],
        expect_outputs={"dm": {"dm_to": "Charlie", "body": "Deadline moved: report due Monday, 2024-05-20."}},
    ),
    Task(
        "email_address_on_page",
        D,
        "Find the e-mail address on www.company.example/contact and send it to Alice.",
        [
            step("w", "get_webpage", url="www.company.example/contact"),
            step("e", "extract", text=ref("w/content"), kind="email"),
            step("dm", "send_direct_message", recipient="Alice", body=ref("e/values/0")),
        ],
        expect_outputs={"dm": {"dm_to": "Alice", "body": "sales@company.example"}},
    ),
]
