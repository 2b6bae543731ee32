"""A search result's snippet (ranking/snippets.py): where the question's words are, those words marked."""
from indexing.text import INDEX_ANALYZER
from ranking.snippets import SNIPPET_CHARS, snippet


def words(s):
    return [s.text[a:b] for a, b in s.highlights]


def test_a_short_text_is_its_own_snippet_with_stemmed_words_marked_and_stop_words_not():
    s = snippet("Renewing my Permit: the permits office renews them.", "how do I renew the permit", INDEX_ANALYZER)
    assert s.text == "Renewing my Permit: the permits office renews them." and s.start == 0 and not s.truncated
    assert words(s) == ["Renewing", "Permit", "permits", "renews"]  # "the", "my": stop words mark nothing


def test_a_long_text_shows_the_window_with_the_most_distinct_question_words():
    text = ("visa " + "filler words here " * 30 + "visa fee and residence permit renewal at the office. "
            + "more filler " * 40)
    s = snippet(text, "visa residence permit renewal", INDEX_ANALYZER)
    assert s.truncated and len(s.text) <= SNIPPET_CHARS and text[s.start:s.start + len(s.text)] == s.text
    assert set(words(s)) == {"visa", "residence", "permit", "renewal"}  # the second visa's window, not the first
    assert s.text[0].isalnum() and text[s.start - 1] == " "  # on word boundaries
    end = s.start + len(s.text)
    assert end == len(text) or not text[end].isalnum()


def test_a_text_without_the_questions_words_shows_its_beginning():
    text = "nothing relevant at all. " * 30
    s = snippet(text, "walrus", INDEX_ANALYZER)
    assert s.start == 0 and s.highlights == [] and s.truncated and text.startswith(s.text)
    assert snippet(text, "the and of", INDEX_ANALYZER).start == 0  # only stop words: nothing to mark
    one_word = snippet("x" * 500, "walrus", INDEX_ANALYZER)  # a word longer than the width is cut
    assert one_word.text == "x" * SNIPPET_CHARS and one_word.truncated


def test_arabic_words_are_marked_as_the_index_stems_them():
    text = "كيف يمكنني تجديد الإقامة في قطر"  # the question: the article on renewal, a bare alef on residence
    s = snippet(text, "التجديد الاقامة", INDEX_ANALYZER)
    assert words(s) == ["تجديد", "الإقامة"], words(s)
    voweled = snippet("أهلاً وَسَهْلاً، تَجْدِيدُ الإقامة", "تجديد", INDEX_ANALYZER)  # diacritics stay in their word
    assert words(voweled) == ["تَجْدِيدُ"], words(voweled)
    assert words(snippet("cafe\u0301 renewal", "café", INDEX_ANALYZER)) == ["cafe\u0301"]  # a decomposed accent


def test_cqa_search_prints_the_snippet_on_one_line_with_the_words_in_bold_on_a_terminal():
    from app.cli import _shown
    from ranking.pipeline import SearchResult
    text = "filler words\n" * 40 + "renew the\npermit here " + "tail " * 80
    r = SearchResult(id="a1", kind="answer", thread_id="t1", text=text, score=1.0, rank=1,
                     snippet=snippet(text, "renew permit", INDEX_ANALYZER))
    plain, bold = _shown(r, False), _shown(r, True)
    assert plain.startswith("...") and plain.endswith("...") and "\n" not in plain and "renew the permit here" in plain
    assert "\033[1mrenew\033[0m the \033[1mpermit\033[0m here" in bold
    r.snippet = None  # asked without snippets: the text's first 300 characters
    assert _shown(r, True) == " ".join(text.split())[:300] + "..."
    ends = "How to renew my visa. " + "filler words here " * 40 + "The permit fee is 500 riyals."
    r = SearchResult(id="a2", kind="answer", thread_id="t1", text=ends, score=1.0, rank=1,
                     snippet=snippet(ends, "visa renewal permit fee", INDEX_ANALYZER))
    assert len(r.snippet.parts) == 2  # the last part ends where the text does: nothing after it
    assert _shown(r, False).startswith("How to renew my visa.") and _shown(r, False).endswith("500 riyals.")
    assert " … " in _shown(r, False)


def test_words_in_two_places_no_one_window_holds_show_as_two_parts_joined():
    """The problem named at the start of a long answer and the fix at its end: two windows of half the room, in the
    text's order, joined by " … ", each marked word at its offset in the joined text, ``parts`` where each is; where
    one window shows as many, one part."""
    from ranking.snippets import SEPARATOR
    text = ("How to renew my visa at the office. " + "filler words here " * 40
            + "The residence permit fee is 500 riyals." + " more filler" * 30)
    s = snippet(text, "visa renewal residence permit fee", INDEX_ANALYZER)
    assert len(s.parts) == 2 and s.parts[0][1] < s.parts[1][0] and s.truncated and len(s.text) <= SNIPPET_CHARS
    first, second = (text[a:b] for a, b in s.parts)
    assert s.text == first + SEPARATOR + second and s.start == s.parts[0][0] == 0
    assert words(s) == ["renew", "visa", "residence", "permit", "fee"]  # all five: one window held three at most
    one = snippet(text, "residence permit fee", INDEX_ANALYZER)  # the end holds them all
    assert len(one.parts) == 1 and one.parts[0] == (one.start, one.start + len(one.text))
    assert set(words(one)) == {"residence", "permit", "fee"}
    assert snippet(text, "visa renewal residence permit fee", INDEX_ANALYZER, max_parts=1).parts == [one.parts[0]]
    short = snippet("renew the visa", "visa", INDEX_ANALYZER)
    assert short.parts == [(0, 14)] and not short.truncated
