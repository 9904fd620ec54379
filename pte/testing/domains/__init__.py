"""Small fixture tool packs for four agent domains, for the data-operations cookbook.

Each module is a tool pack (`pte.load_pack("pte.testing.domains.workspace")`) over
fixed, in-memory data: reads return that data, writes return what they would do (so a
test asserts the exact outcome from the step output) and change nothing. The data holds
the textures real tools have: free-text bodies and subjects, ratings and prices written as
text, objects keyed by names, lists of plain strings, timestamps in several formats.

- `workspace`: e-mail, calendar and cloud files.
- `travel`: hotels, restaurants and car rental listings.
- `banking`: transactions, scheduled payments and bill files.
- `chat`: team chat channels, direct messages and web pages.
"""

DOMAINS = ("workspace", "travel", "banking", "chat")

__all__ = ["DOMAINS"]
