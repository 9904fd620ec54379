"""Cookbook: tasks as a model plays them through the whole engine (issue 25).

Written the way models write plans: long descriptive step ids, ``"default": null`` on a step
that may be skipped, a search that finds nothing, a later stage that refers back to what an
earlier stage picked, and mistakes the compiler sends back once (a wrong pointer, a reused
id, a cycle, an untrusted value wired into a write). Each asserts exactly how the run ends.
tests/e2e/test_cookbook_model.py runs them; add a `ModelTask` here and it is run there.
"""

from __future__ import annotations

from typing import Any

from pte.testing.cookbook import ModelTask, ref, step


def plan(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"pte_plan": "1", "steps": list(steps), **extra}


def when(item: dict[str, Any], condition: dict[str, Any], default: Any) -> dict[str, Any]:
    return {**item, "when": condition, "default": default}


UNREAD = step("unread_emails_in_my_inbox", "get_unread_emails")

MODEL_TASKS = [
    ModelTask(
        "count_unread_with_descriptive_ids",
        "workspace",
        "How many unread e-mails do I have?",
        planner=[
            plan(
                UNREAD,
                step(
                    "number_of_unread_emails_in_my_inbox",
                    "count",
                    records=ref("unread_emails_in_my_inbox/emails"),
                ),
                result=ref("number_of_unread_emails_in_my_inbox/count"),
            )
        ],
        expect_result=4,
    ),
    ModelTask(
        "newest_party_email_or_null",
        "workspace",
        "What is the newest e-mail about the summer party? Say so if there is none.",
        planner=[
            plan(
                step("summer_party_email_search_results", "search_emails", query="summer party"),
                when(
                    step(
                        "newest_summer_party_email",
                        "extreme_by",
                        records=ref("summer_party_email_search_results/emails"),
                        field="timestamp",
                        which="max",
                    ),
                    {"nonempty": ref("summer_party_email_search_results/emails")},
                    None,
                ),
                result={"newest_email": ref("newest_summer_party_email")},
            )
        ],
        expect_result={"newest_email": None},
        expect_records={"condition": 1},
    ),
    ModelTask(
        "empty_file_search_counts_zero",
        "workspace",
        "How many files named 'budget-2025.xlsx' do I have?",
        planner=[
            plan(
                step("files_named_budget_2025", "search_files_by_filename", filename="budget-2025.xlsx"),
                step("how_many_budget_files", "count", records=ref("files_named_budget_2025/files")),
                result=ref("how_many_budget_files/count"),
            )
        ],
        expect_result=0,
    ),
    ModelTask(
        "latest_budget_email_with_a_message_default",
        "workspace",
        "Who sent the latest e-mail about 'Budget review'? If none, say 'nobody'.",
        planner=[
            plan(
                step("budget_review_emails", "search_emails", query="Budget review"),
                when(
                    step(
                        "latest_budget_review_email",
                        "extreme_by",
                        records=ref("budget_review_emails/emails"),
                        field="timestamp",
                        which="max",
                    ),
                    {"nonempty": ref("budget_review_emails/emails")},
                    {"record": {"sender": "nobody"}},
                ),
                result=ref("latest_budget_review_email/record/sender"),
            )
        ],
        expect_result="lisa@partner.example",
    ),
    ModelTask(
        "null_default_field_reader_repaired_to_whole_value",
        "workspace",
        "Show me the newest e-mail about the summer party, or nothing if there is none.",
        planner=[
            plan(
                step("summer_party_emails", "search_emails", query="summer party"),
                when(
                    step("newest_summer_party_email", "first", records=ref("summer_party_emails/emails")),
                    {"nonempty": ref("summer_party_emails/emails")},
                    None,
                ),
                result=ref("newest_summer_party_email/record/subject"),
            )
        ],
        repair=[
            plan(
                step("summer_party_emails", "search_emails", query="summer party"),
                when(
                    step("newest_summer_party_email", "first", records=ref("summer_party_emails/emails")),
                    {"nonempty": ref("summer_party_emails/emails")},
                    None,
                ),
                result=ref("newest_summer_party_email"),
            )
        ],
        expect_result=None,
        expect_records={"repair": 1, "plan_rejected": 1},
        expect_rejected=("bad_reference",),
    ),
    ModelTask(
        "stage_two_reads_what_stage_one_picked",
        "workspace",
        "Read my trip notes and tell me the first line.",
        planner=[
            plan(
                step("all_my_cloud_files", "list_files"),
                step(
                    "files_with_id_and_content",
                    "pick",
                    records=ref("all_my_cloud_files/files"),
                    fields=["id", "content"],
                ),
                **{"continue": {"files": ref("files_with_id_and_content/records")}},
            )
        ],
        stage=[
            plan(
                step(
                    "trip_notes_lines", "split_text", text=ref("files_with_id_and_content/records/0/content")
                ),
                result=ref("trip_notes_lines/values/0"),
            )
        ],
        expect_result="# Trip to Lisbon",
        expect_records={"stage": 1},
    ),
    ModelTask(
        "stage_two_reads_the_largest_transaction",
        "banking",
        "What was my largest transaction? Then tell me its subject.",
        planner=[
            plan(
                step("my_recent_transactions", "get_most_recent_transactions", n=100),
                step(
                    "largest_recent_transaction",
                    "extreme_by",
                    records=ref("my_recent_transactions/transactions"),
                    field="amount",
                    which="max",
                ),
                **{"continue": {"largest": ref("largest_recent_transaction/record/id")}},
            )
        ],
        stage=[
            plan(
                step(
                    "largest_transaction_subject",
                    "format_text",
                    template="{subject}",
                    values={"subject": ref("largest_recent_transaction/record/subject")},
                ),
                result={"subject": ref("largest_transaction_subject/text")},
            )
        ],
        expect_result={"subject": "Rent March"},
    ),
    ModelTask(
        "stage_two_reads_sorted_scheduled_payments",
        "banking",
        "List my scheduled payments, then give me the date of the earliest one.",
        planner=[
            plan(
                step("scheduled_payments", "get_scheduled_transactions"),
                step(
                    "scheduled_payments_by_date",
                    "sort_records",
                    records=ref("scheduled_payments/transactions"),
                    by="date",
                ),
                **{"continue": {"count": ref("scheduled_payments_by_date/count")}},
            )
        ],
        stage=[
            plan(
                step(
                    "earliest_scheduled_payment",
                    "first",
                    records=ref("scheduled_payments_by_date/records"),
                ),
                result=ref("earliest_scheduled_payment/record/date"),
            )
        ],
        expect_result="2024-05-01",
    ),
    ModelTask(
        "wrong_pointer_repaired",
        "banking",
        "How many recent transactions do I have?",
        planner=[
            plan(
                step("my_recent_transactions", "get_most_recent_transactions"),
                step(
                    "recent_transaction_count",
                    "count",
                    records=ref("my_recent_transactions/transaction_list"),
                ),
                result=ref("recent_transaction_count/count"),
            )
        ],
        repair=[
            plan(
                step("my_recent_transactions", "get_most_recent_transactions"),
                step("recent_transaction_count", "count", records=ref("my_recent_transactions/transactions")),
                result=ref("recent_transaction_count/count"),
            )
        ],
        expect_result=6,
        expect_records={"repair": 1},
        expect_rejected=("bad_reference",),
    ),
    ModelTask(
        "duplicate_step_id_repaired",
        "chat",
        "How many messages are in the channels 'general' and 'random'?",
        planner=[
            plan(
                step("channel_messages", "read_channel_messages", channel="general"),
                step("channel_messages", "read_channel_messages", channel="random"),
                step("count_general", "count", records=ref("channel_messages/messages")),
                step("count_random", "count", records=ref("channel_messages/messages")),
                result={"general": ref("count_general/count"), "random": ref("count_random/count")},
            )
        ],
        repair=[
            plan(
                step("general_channel_messages", "read_channel_messages", channel="general"),
                step("random_channel_messages", "read_channel_messages", channel="random"),
                step("count_general", "count", records=ref("general_channel_messages/messages")),
                step("count_random", "count", records=ref("random_channel_messages/messages")),
                result={"general": ref("count_general/count"), "random": ref("count_random/count")},
            )
        ],
        expect_result={"general": 4, "random": 1},
        expect_records={"repair": 1},
        expect_rejected=("duplicate_step_id",),
    ),
    ModelTask(
        "cycle_through_after_repaired",
        "chat",
        "How many messages are in the channel 'general'?",
        planner=[
            plan(
                {
                    **step("general_channel_messages", "read_channel_messages", channel="general"),
                    "after": ["count_them"],
                },
                step("count_them", "count", records=ref("general_channel_messages/messages")),
                result=ref("count_them/count"),
            )
        ],
        repair=[
            plan(
                step("general_channel_messages", "read_channel_messages", channel="general"),
                step("count_them", "count", records=ref("general_channel_messages/messages")),
                result=ref("count_them/count"),
            )
        ],
        expect_result=4,
        expect_rejected=("plan_cycle",),
        expect_records={"repair": 1},
    ),
    ModelTask(
        "untrusted_subject_repaired_with_the_subject_from_the_request",
        "workspace",
        "Reply 'Received, thanks.' with the subject 'Re: Budget review' to the 'Budget review' e-mail; "
        "the sender is lisa@partner.example.",
        planner=[
            plan(
                step("budget_review_emails", "search_emails", query="Budget review"),
                step(
                    "reply_to_budget_review",
                    "send_email",
                    recipients=[ref("budget_review_emails/emails/0/sender")],
                    subject=ref("budget_review_emails/emails/0/subject"),  # third-party text
                    body="Received, thanks.",
                ),
                result=ref("reply_to_budget_review"),
            )
        ],
        repair=[
            plan(
                step(
                    "reply_to_budget_review",
                    "send_email",
                    recipients=["lisa@partner.example"],
                    subject="Re: Budget review",
                    body="Received, thanks.",
                ),
                result=ref("reply_to_budget_review"),
            )
        ],
        expect_result={
            "sent": {
                "recipients": ["lisa@partner.example"],
                "subject": "Re: Budget review",
                "body": "Received, thanks.",
            }
        },
        expect_records={"repair": 1},
        expect_rejected=("policy_violation",),
    ),
    ModelTask(
        "a_repair_that_repeats_the_mistake_ends_replans_exhausted",
        "travel",
        "Which hotels are there in Paris?",
        planner=[
            plan(
                step("paris_hotels", "get_all_hotels_in_city", city="Paris"), result=ref("paris_hotels/names")
            )
        ],
        repair=[
            plan(
                step("paris_hotels", "get_all_hotels_in_city", city="Paris"), result=ref("paris_hotels/names")
            )
        ],
        expect_status="failed_closed",
        expect_reason="replans_exhausted",
        expect_message="sent back once",
        expect_records={"repair": 1, "plan_rejected": 2, "step_started": 0},
        expect_rejected=("bad_reference", "bad_reference"),
    ),
    ModelTask(
        "prose_instead_of_a_plan_is_not_repaired",
        "travel",
        "Which hotels are there in Paris?",
        planner=["I would look up the hotels in Paris with get_all_hotels_in_city and list them."],
        expect_status="failed_closed",
        expect_reason="invalid_json",
        expect_records={"repair": 0},
        expect_rejected=("invalid_json",),
    ),
]
