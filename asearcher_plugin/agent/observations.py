"""Tool output in ASearcher's wire format (`tools.observation_format: asearcher`).

A tool result is one or more blocks. Each block is shown to the model right after the call as
`"\\n\\n" + block + "\\n<think>\\n"`, and the model summarises it up to `</think>`; a page is cut into
chunks, one block each, shown one per call. Once summarised, a page chunk is worth only its stub
(`>>>> Page i >>>>` and its first 100 characters) to later calls; search results keep their text.
The numbers and strings below are ASearcher's, so a checkpoint trained there reads what it was
trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

DOC_CHARS = 5_000
PAGE_CHARS = 250_000
CHUNK_CHARS = 25_000
MAX_CHUNKS = 10
STUB_CHARS = 100
NO_RESULTS = "No search results are found."
NO_PAGE = "No More Information is Found for this URL."
SUMMARY_STOP = ["</think>"]  # the call after a block is shown ends when the model closes its summary


@dataclass(frozen=True)
class Block:
    text: str  # what the call right after the tool call sees
    short: str  # what every later call sees in its place


def injected(block: str) -> str:
    """A block as it is appended to the transcript."""
    return "\n\n" + block + "\n<think>\n"


def _info(body: str) -> str:
    return "<information>\n" + body + "\n</information>"


def search_block(docs: list[dict], topk: int) -> Block:
    shown = docs[:topk]
    if not shown:
        text = _info(NO_RESULTS)
    else:
        text = _info(
            "\n\n".join(
                f"[Doc {k}]({_str(d.get('url'))}):\n" + doc_body(d)[:DOC_CHARS] for k, d in enumerate(shown, 1)
            )
        )
    return Block(text, text)


def doc_body(doc: dict) -> str:
    """A KB row's `contents` ("Title"\\ntext), or a web result's "title snippet", as ASearcher's clients give them."""
    if isinstance(doc.get("contents"), str):
        return doc["contents"]
    return _str(doc.get("title")) + " " + _str(doc.get("text"))


def page_blocks(page: str | None) -> list[Block]:
    if page is None or not page.strip():
        text = _info(NO_PAGE)
        return [Block(text, text)]
    page = page[:PAGE_CHARS]
    blocks = []
    for i, start in enumerate(range(0, min(len(page), CHUNK_CHARS * MAX_CHUNKS), CHUNK_CHARS), 1):
        chunk = page[start : start + CHUNK_CHARS]
        head = f">>>> Page {i} >>>>\n\n"
        blocks.append(Block(_info(head + chunk), _info(head + chunk[:STUB_CHARS])))
    return blocks


def failure_block(message: str) -> Block:
    """A failed tool call (ASearcher has no text for it: its client retries, then raises)."""
    text = _info(message)
    return Block(text, text)


def _str(value) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)
