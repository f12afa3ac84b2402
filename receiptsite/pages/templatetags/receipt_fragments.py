"""`{% fragment "name" [key] %}…{% endfragment %}`: a part of the receipt page rendered once
per distinct key and kept in a bounded per-process LRU.

The key is the context's `fragment_key` (presentation.page_context): the stored bytes
themselves, the language, and the columns the cached parts show (the public id, recorded_at).
A receipt is immutable, so such a part cannot go stale; bytes changed behind the site's back
are another key and are rendered afresh. Only parts drawn from the document and those
columns may be wrapped: never the verification, the links, the hand-off (its follow-up is
read now) or anything of the request. Without a `fragment_key` the part is just rendered.

A part that depends on something else names its own key, a context variable holding exactly
what the part shows (the verification panel's `checks_key`: the language, the status and each
check's name, result and, unless it passed, its detail; `assurance_key`: the language and
every word and result of "Who vouches for what").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from django import template
from django.template.base import Parser, Token
from django.utils.safestring import SafeString

from receiptsite.lib import memo

register = template.Library()

LIMIT = 2048  # fragments, about three per receipt; bytes over memo.SMALL are never kept

_rendered: OrderedDict[tuple[Any, ...], SafeString] = OrderedDict()
_lock = threading.Lock()  # gunicorn's threads share the cache


class FragmentNode(template.Node):
    def __init__(self, name: str, key: str, nodelist: template.NodeList) -> None:
        self.name, self.key, self.nodelist = name, key, nodelist

    def render(self, context: template.Context) -> SafeString:
        base = context.get(self.key)
        data = memo.first(base)
        if base is None or (isinstance(data, bytes) and not memo.memoisable(data)):
            return SafeString(self.nodelist.render(context))
        key = (self.name, base)
        with _lock:
            cached = _rendered.get(key)
            if cached is not None:
                _rendered.move_to_end(key)
                return cached
        html = SafeString(self.nodelist.render(context))
        with _lock:
            _rendered[key] = html
            while len(_rendered) > LIMIT:
                _rendered.popitem(last=False)
        return html


@register.tag("fragment")
def fragment(parser: Parser, token: Token) -> FragmentNode:
    bits = token.split_contents()
    if len(bits) not in (2, 3) or bits[1][0] not in "\"'" or bits[1][0] != bits[1][-1]:
        raise template.TemplateSyntaxError(
            'usage: {% fragment "name" [key variable] %}…{% endfragment %}'
        )
    nodelist = parser.parse(("endfragment",))
    parser.delete_first_token()
    key = bits[2] if len(bits) == 3 else "fragment_key"
    return FragmentNode(bits[1][1:-1], key, nodelist)
