"""The Chinese translation: every string of the pages translated once, in full, with the same
placeholders, markup and links as its source; the compiled catalogues agree with the .po files;
and a page in Chinese says each of its sentences once, as the English page does."""

from __future__ import annotations

import ast
import gettext
import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client
from django.utils import translation

from receiptsite.pages.presentation import BOUNDARY_TRANSLATIONS
from tests.conftest import Producer, tamper

pytestmark = pytest.mark.db

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = ROOT / "receiptsite/locale/zh_Hans/LC_MESSAGES"
DOMAINS = ("django", "djangojs")


@dataclass
class Entry:
    msgid: str
    msgctxt: str | None = None
    msgid_plural: str | None = None
    msgstr: dict[int, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    obsolete: bool = False


def read_po(path: Path) -> list[Entry]:
    """Every entry of a .po file, its quoted lines joined as gettext joins them."""
    entries: list[Entry] = []
    current = Entry(msgid="")
    part = ("", 0)
    flags: set[str] = set()
    keyword = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr)(?:\[(\d+)\])?\s+(".*")$')
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        obsolete = raw.startswith("#~")
        line = raw[2:].strip() if obsolete else raw.strip()
        if line.startswith("#,"):
            flags = {flag.strip() for flag in line[2:].split(",")}
            continue
        if not line or line.startswith("#"):
            continue
        found = keyword.match(line)
        if found:
            name, index, quoted = found.groups()
            if name in ("msgctxt", "msgid") and (current.msgstr or not entries):
                current = Entry(msgid="", flags=flags, obsolete=obsolete)
                entries.append(current)
                flags = set()
            part = (name, int(index or 0))
            if name in ("msgctxt", "msgid_plural"):
                setattr(current, name, "")
        elif line.startswith('"') and part[0]:
            quoted = line
        else:
            raise AssertionError(f"{path.name}:{number}: cannot read {raw!r}")
        text = ast.literal_eval(quoted)
        name, index_number = part
        if name == "msgstr":
            current.msgstr[index_number] = current.msgstr.get(index_number, "") + text
        else:
            setattr(current, name, (getattr(current, name) or "") + text)
    return entries


def translations(domain: str) -> list[Entry]:
    """The entries of a domain, without the header."""
    return [e for e in read_po(MESSAGES / f"{domain}.po") if e.msgid or e.msgctxt]


# A sentence ends with Chinese or Western end punctuation (a full stop only before a space or
# the end, so that "receipt-keys.json" or "RFC 8785." stay whole).
SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|(?<=\.)(?=\s|$)")

# What a translation carries over exactly: printf and brace placeholders, HTML tags with their
# attributes, URLs and site paths, and technical names with digits (SHA-256, Ed25519, RFC 8785).
PLACEHOLDERS = re.compile(
    r"%\(\w+\)[sd]|%[sd]|\{\w*\}|</?[a-zA-Z][^>]*>|https?://[^\s\"<>]+"
    r"|(?<![\w/<])/[\w.-]+/[\w./-]+|\b[A-Za-z]+-?\d+\b|\b\d{3,}\b"
)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(text) if s.strip()]


def repeated(text: str) -> list[str]:
    return [s for s, n in Counter(sentences(text)).items() if n > 1]


def every_translation() -> list[tuple[str, Entry, str, str]]:
    """(domain, entry, source, translation) for every msgstr, each against its source."""
    pairs: list[tuple[str, Entry, str, str]] = []
    for domain in DOMAINS:
        for entry in translations(domain):
            # Chinese has one plural form: msgstr[0] stands for the plural source as well.
            source = entry.msgid if entry.msgid_plural is None else entry.msgid_plural
            pairs.extend((domain, entry, source, text) for text in entry.msgstr.values())
    return pairs


def test_the_helpers_see_a_repeated_sentence_and_a_missing_placeholder() -> None:
    # The check reads sentences the way the files hold them.
    assert repeated("它记录了这些。它不能表明其他。它记录了这些。") == ["它记录了这些。"]
    assert repeated("Same. Other. Same.") == ["Same."]
    assert repeated("公钥位于 <a href=\"/k.json\">x</a>；签名是 Ed25519。") == []
    assert Counter(PLACEHOLDERS.findall('<a href="%(p)s">%(k)s</a> {x} %s SHA-256')) == Counter(
        ['<a href="%(p)s">', "%(k)s", "</a>", "{x}", "%s", "SHA-256"]
    )


def test_each_catalogue_is_read_in_full() -> None:
    for domain in DOMAINS:
        entries = translations(domain)
        text = (MESSAGES / f"{domain}.po").read_text(encoding="utf-8")
        quoted = len(re.findall(r"^msgid ", text, re.M)) - 1  # the header is an entry too
        assert len(entries) == quoted > 20


def test_no_translation_says_a_sentence_twice() -> None:
    twice = [(domain, e.msgid, repeated(text)) for domain, e, _, text in every_translation()
             if repeated(text)]
    assert twice == []


def test_every_translation_keeps_its_placeholders_markup_and_links() -> None:
    differ = [
        (domain, source, sorted(PLACEHOLDERS.findall(source)), sorted(PLACEHOLDERS.findall(text)))
        for domain, _, source, text in every_translation()
        if Counter(PLACEHOLDERS.findall(source)) != Counter(PLACEHOLDERS.findall(text))
    ]
    assert differ == []


def test_every_string_is_translated_and_none_is_fuzzy_or_obsolete() -> None:
    for domain in DOMAINS:
        entries = translations(domain)
        assert [e.msgid for e in entries if not all(e.msgstr.values()) or not e.msgstr] == []
        assert [e.msgid for e in entries if "fuzzy" in e.flags] == []
        assert [e.msgid for e in entries if e.obsolete] == []
        keys = [(e.msgctxt, e.msgid) for e in entries]
        assert len(keys) == len(set(keys))


def test_the_compiled_catalogues_hold_exactly_the_po_files() -> None:
    for domain in DOMAINS:
        expected: dict[Any, str] = {}
        for entry in translations(domain):
            key = f"{entry.msgctxt}\x04{entry.msgid}" if entry.msgctxt is not None else entry.msgid
            if entry.msgid_plural is None:
                expected[key] = entry.msgstr[0]
            else:
                expected.update({(key, i): text for i, text in entry.msgstr.items()})
        with open(MESSAGES / f"{domain}.mo", "rb") as handle:
            catalog = gettext.GNUTranslations(handle)
        compiled = {k: v for k, v in vars(catalog)["_catalog"].items() if k != ""}
        assert compiled == expected


def test_the_javascript_catalogue_in_chinese_is_the_djangojs_translation(
    client: Client, db: None
) -> None:
    answer = client.get("/jsi18n/", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert answer["Content-Language"] == "zh-hans"
    served = re.search(r"newcatalog = (\{.*?\});", answer.content.decode(), re.S)
    assert served is not None
    assert json.loads(served.group(1)) == {e.msgid: e.msgstr[0] for e in translations("djangojs")}


@pytest.mark.skipif(shutil.which("xgettext") is None, reason="makemessages needs GNU gettext")
def test_the_catalogues_hold_every_string_the_code_marks_and_no_other(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Extract afresh with Django's own makemessages, from a copy of the marked sources, into
    # an empty locale folder: the msgids must be exactly those of the committed .po files.
    tree = tmp_path / "tree"
    for folder in ("receiptsite", "templates", "static/js"):
        shutil.copytree(ROOT / folder, tree / folder,
                        ignore=shutil.ignore_patterns("locale", "__pycache__", "migrations"))
    settings.LOCALE_PATHS = [tmp_path / "locale"]
    monkeypatch.chdir(tree)
    call_command("makemessages", locale=["zh_Hans"], verbosity=0)
    call_command("makemessages", locale=["zh_Hans"], domain="djangojs", verbosity=0)
    for domain in DOMAINS:
        fresh = read_po(tmp_path / "locale/zh_Hans/LC_MESSAGES" / f"{domain}.po")
        marked = {(e.msgctxt, e.msgid, e.msgid_plural) for e in fresh if e.msgid}
        committed = {(e.msgctxt, e.msgid, e.msgid_plural) for e in translations(domain)}
        assert sorted(marked - committed, key=str) == []  # marked, but not translated
        assert sorted(committed - marked, key=str) == []  # translated, but no longer marked


# --- The pages as a Chinese reader gets them ----------------------------------------------

BLOCKS = {"p", "li", "dt", "dd", "h1", "h2", "h3", "h4", "div", "td", "th", "pre", "summary",
          "caption", "label", "button", "title", "figcaption", "legend", "option"}


class Paragraphs(HTMLParser):
    """The text of each block of a page, inline markup (a link, <code>) joined in."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[list[str]] = [[]]
        self.blocks: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self.hidden += 1
        elif tag in BLOCKS:
            self.open.append([])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self.hidden -= 1
        elif tag in BLOCKS and len(self.open) > 1:
            self.end_block()

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.open[-1].append(data)

    def end_block(self) -> None:
        text = " ".join("".join(self.open.pop()).split())
        if text:
            self.blocks.append(text)


def paragraphs(html: str) -> list[str]:
    parser = Paragraphs()
    parser.feed(html)
    parser.close()
    while parser.open:
        parser.end_block()
    return parser.blocks


def said_twice(html: str) -> list[str]:
    """Sentences a block of the page says twice."""
    return [s for block in paragraphs(html) for s in repeated(block)]


def both_languages(client: Client, path: str) -> tuple[str, str]:
    english = client.get(path, {"lang": "en"})
    chinese = client.get(path, {"lang": "zh-hans"})
    assert english["Content-Language"] == "en"
    assert chinese["Content-Language"] == "zh-hans"
    return english.content.decode(), chinese.content.decode()


def assert_said_once(english: str, chinese: str) -> None:
    assert said_twice(english) == []
    assert said_twice(chinese) == []
    assert chinese.count("receipt-keys.json") == english.count("receipt-keys.json")
    assert chinese.count("<a ") == english.count("<a ")


def test_the_translation_helper_sees_a_paragraph_said_twice() -> None:
    page = "<p>公钥位于 <a href='/k'>k</a>。签名有效。公钥位于 <a href='/k'>k</a>。签名有效。</p>"
    assert said_twice(page) == ["公钥位于 k。", "签名有效。"]
    assert said_twice("<p>签名有效。</p><p>签名有效。</p>") == []


@pytest.mark.parametrize("phase", ["start", "end", "completion", "confirmation", "handoff"])
def test_a_receipt_page_in_chinese_says_each_sentence_once(
    producer: Producer, client: Client, phase: str
) -> None:
    changes: dict[str, Any] = {"phase": phase, "idempotency_key": f"zh/{phase}"}
    if phase == "start":
        changes["outcome"] = None
    receipt = producer.publish(**changes)
    english, chinese = both_languages(client, f"/run/{receipt['id']}")
    assert_said_once(english, chinese)
    # The site's boundary statement is shown as stored, beside its translation, once each.
    boundary = next(b for b in BOUNDARY_TRANSLATIONS if b in english)
    with translation.override("zh-hans"):
        translated = str(BOUNDARY_TRANSLATIONS[boundary])
    assert translated != boundary
    assert chinese.count(translated) == 1
    assert chinese.count(boundary) == english.count(boundary)


def test_the_tamper_warning_in_chinese_says_each_sentence_once(
    producer: Producer, client: Client
) -> None:
    receipt = producer.publish()
    tamper(receipt["id"], workflow_id="wf-forged")
    english, chinese = both_languages(client, f"/run/{receipt['id']}")
    assert "Do not rely on it" in english
    assert "请不要依赖它" in chinese
    assert_said_once(english, chinese)


def test_the_auditors_section_in_chinese_says_each_sentence_once(producer: Producer) -> None:
    user = User.objects.create_user("ada", password="pw-for-tests-only", is_staff=True)
    user.groups.add(Group.objects.get(name="Auditors"))
    auditor = Client()
    auditor.force_login(user)
    english, chinese = both_languages(auditor, f"/run/{producer.publish()['id']}")
    assert "Only signed-in auditors see this section" in english
    assert_said_once(english, chinese)


@pytest.mark.parametrize("path", ["/", "/run/00000000-0000-4000-8000-000000000000"])
def test_the_home_and_404_pages_in_chinese_say_each_sentence_once(
    client: Client, db: None, path: str
) -> None:
    english = client.get(path, {"lang": "en"}).content.decode()
    chinese = client.get(path, {"lang": "zh-hans"}).content.decode()
    assert 'lang="zh-hans"' in chinese
    assert_said_once(english, chinese)


def test_the_lockout_page_in_chinese_says_each_sentence_once(db: None, settings: Any) -> None:
    User.objects.create_user("ada", password="a-long-test-password-1", is_staff=True)

    def sign_in(language: str) -> Any:
        return Client().post(
            "/admin/login/?next=/admin/",
            {"username": "ada", "password": "not-the-password", "next": "/admin/"},
            headers={"Accept-Language": language},
        )

    while (answer := sign_in("zh-CN,zh;q=0.9")).status_code != 429:
        assert answer.status_code == 200
    chinese = answer.content.decode()
    english = sign_in("en").content.decode()
    assert "Too many failed sign-ins" in english
    assert "登录失败次数过多" in chinese
    assert "Too many failed sign-ins" not in chinese
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    assert f"已输错密码 {settings.AXES_FAILURE_LIMIT} 次" in chinese
    assert f"请在 {minutes} 分钟后重试" in chinese
    assert_said_once(english, chinese)

