"""The Chinese edition's search: words cut by jieba with the edition's own terms,
and queries cut into the words the index has.

Sphinx's Chinese search (``html_search_language: zh``) cuts the text with jieba;
its one option, ``html_search_options: {dict: ...}``, loads a user dictionary
(``zh_edition.search_dictionary``: the glossary's Chinese terms, their aliases,
``search_words`` of ``book/zh/_meta.yml`` and every bold term of the pages). A
term jieba does not know is cut into smaller words (教师强制 → 教师 强制), and
the browser's query splitter only splits at spaces and punctuation, so a reader
typing 教师强制 found nothing. Two fixes, either enough for a dictionary term:

* the dictionary, on the index side: the term is one word of the index;
* :data:`JS_SPLITTER`, on the query side: a run of Chinese characters that is not
  a word of the index is cut into the longest words of the index, left to right
  (forward maximum matching), so a term the dictionary lacks still finds the
  pages that have all its parts.

Loaded by the Chinese build only (``zh_edition.zh_config``).
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.search.zh import SearchChinese

JS_SPLITTER = r"""
function splitQuery(query) {
  const parts = query
    .split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)
    .filter((term) => term);
  const index =
    typeof Search !== "undefined" && Search._index ? Search._index : null;
  if (!index) return parts;
  const known = (word) =>
    Object.prototype.hasOwnProperty.call(index.terms, word) ||
    Object.prototype.hasOwnProperty.call(index.titleterms, word);
  const out = [];
  for (const part of parts) {
    if (known(part.toLowerCase())) {
      out.push(part);
      continue;
    }
    // Chinese runs and the rest (Latin, digits) apart: "softmax函数"
    for (const run of part.match(/\p{Script=Han}+|[^\p{Script=Han}]+/gu)) {
      if (!/\p{Script=Han}/u.test(run)) {
        out.push(run);
        continue;
      }
      let i = 0;
      while (i < run.length) {
        let j = run.length;
        while (j > i + 1 && !known(run.slice(i, j))) j--;
        const word = run.slice(i, j);
        // a lone character the index has no word for would match no page
        if (j > i + 1 || known(word)) out.push(word);
        i = j;
      }
    }
  }
  return out.length ? out : parts;
}
"""


class SearchChineseTerms(SearchChinese):
    """Sphinx's Chinese search with the query splitter above, and every term of
    the dictionary that the text has indexed as a word. jieba's segmentation
    alone loses some: its search mode adds only the two- and three-character
    words inside a word (点积注意力 inside 缩放点积注意力), and a word may end
    inside a term (软性注意力|机制 hides 注意力机制)."""

    js_splitter_code = JS_SPLITTER
    terms: frozenset[str] = frozenset()

    def init(self, options: dict[str, str]) -> None:
        super().init(options)
        path = options.get("dict")
        if path:
            with open(path, encoding="utf-8") as lines:
                self.terms = frozenset(line.split(" ")[0] for line in lines)

    def split(self, input: str) -> list[str]:
        words = super().split(input)
        seen = set(words)
        return words + [t for t in sorted(self.terms) if t in input and t not in seen]


def index_words(text: str, dictionary: str | None = None) -> list[str]:
    """The words the Chinese search index gets from ``text`` (tests use it)."""
    search = SearchChineseTerms({"dict": dictionary} if dictionary else {})
    return [w for w in search.split(text) if search.word_filter(w)]


def setup(app: Sphinx) -> dict:
    app.add_search_language(SearchChineseTerms)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
