"""Wiki markup cleaning, passage splitting, URLs and the streaming XML reader on the real sample dump."""

import bz2

import pytest

from local_retriever.sample import sample_dump_path
from local_retriever.wikitext import clean_wikitext, split_passages, title_to_url, url_to_title
from local_retriever.wikixml import iter_pages

MARKUP = """{{Infobox country|name=Angola|capital=[[Luanda]]}}
'''Angola''' is a country in [[Southern Africa|southern Africa]].<ref name="x">{{cite web|url=http://a}}</ref> Its capital is [[Luanda]].<ref>Source</ref>
[[File:Flag of Angola.svg|thumb|The [[flag]] of Angola]]
{| class="wikitable"
| cell || other
|}
<!-- hidden comment --> See the [http://example.org official site].
== History ==
Independence came in 1975.
== References ==
* A reference that must not survive
[[Category:Countries in Africa]]
[[pt:Angola]]"""  # noqa: E501


def test_clean_wikitext_removes_markup_and_keeps_link_text():
    text = clean_wikitext(MARKUP)
    assert "Angola is a country in southern Africa. Its capital is Luanda." in text
    assert "official site" in text and "Independence came in 1975." in text
    for junk in (
        "{{",
        "}}",
        "<ref",
        "Source",
        "File:",
        "flag",
        "wikitable",
        "cell",
        "hidden",
        "must not survive",
        "Category",
        "pt:",
        "'''",
        "History",
    ):
        assert junk not in text, junk


def test_clean_wikitext_never_raises_on_broken_markup():
    for raw in ("{{unclosed [[link", "<ref>never closed", "{| table without end", "]]}}|}", "", "\x00\x01"):
        assert isinstance(clean_wikitext(raw), str)


def test_split_passages():
    text = " ".join(f"w{i}" for i in range(250))
    parts = split_passages(text, 100)
    assert [len(p.split()) for p in parts] == [100, 100, 50]  # a 50-word tail stands alone
    assert [len(p.split()) for p in split_passages(" ".join(["x"] * 220), 100)] == [100, 120]
    assert split_passages("", 100) == []


def test_title_url_round_trip():
    assert title_to_url("Albert Einstein") == "https://en.wikipedia.org/wiki/Albert_Einstein"
    assert title_to_url("animalia (book)") == "https://en.wikipedia.org/wiki/Animalia_(book)"
    for title in ("Albert Einstein", "Animalia (book)", "Transport in Angola", "Gödel's theorem"):
        assert url_to_title(title_to_url(title)) == title
    assert url_to_title("https://en.wikipedia.org/w/index.php?title=Angola") == "Angola"
    assert url_to_title("https://example.com/wiki/Angola") is None


@pytest.fixture(scope="module")
def pages():
    return list(iter_pages(sample_dump_path()))


def test_real_dump_pages_and_redirects(pages):
    articles = {p.title: p for p in pages if p.ns == 0 and not p.redirect}
    redirects = [p for p in pages if p.redirect]
    assert {"Albert Einstein", "Angola", "Algorithm", "Atlantic Ocean"} <= set(articles)
    assert len(articles) >= 100 and len(redirects) >= 50
    assert all(r.redirect and r.text.lstrip().upper().startswith("#REDIRECT") for r in redirects)


def test_real_dump_cleans_completely(pages):
    for p in pages:
        if p.ns == 0 and not p.redirect:
            text = clean_wikitext(p.text)
            for junk in ("{{", "}}", "<ref", "[[File:", "[[Category:", "{|", "[[", "]]"):
                assert junk not in text, (p.title, junk)


def test_xml_and_bz2_read_alike_and_bad_files_are_named(tmp_path):
    xml = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/"><page><title>Foo</title><ns>0</ns><id>7</id>
    <revision><text>'''Foo''' is a [[bar]].</text></revision></page><page><title>Baz</title><ns>0</ns><id>8</id>
    <redirect title="Foo" /><revision><text>#REDIRECT [[Foo]]</text></revision></page></mediawiki>"""
    (tmp_path / "d.xml").write_text(xml)
    (tmp_path / "d.xml.bz2").write_bytes(bz2.compress(xml.encode()))
    a, b = list(iter_pages(tmp_path / "d.xml")), list(iter_pages(tmp_path / "d.xml.bz2"))
    assert a == b and a[0].title == "Foo" and a[0].page_id == "7" and a[1].redirect == "Foo"
    (tmp_path / "not.xml").write_text("<html><body>hi</body></html>")
    with pytest.raises(ValueError, match="not.xml is not a MediaWiki XML dump"):
        list(iter_pages(tmp_path / "not.xml"))
    (tmp_path / "garbage.xml").write_text("this is not xml at all")
    with pytest.raises(ValueError, match="garbage.xml"):
        list(iter_pages(tmp_path / "garbage.xml"))
