"""The search page in a real headless Chromium (Debian's chromium + chromium-driver) against a real
uvicorn process: type a question, get results, open an explain view, read the service panel."""
import os
import shutil
import subprocess
import time

import pytest

from .conftest import CQA, ROOT
from .test_api import free_port, start_server, wait_ready

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture()
def browser(tmp_path):
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        why = (f"the browser test needs Debian's chromium and chromium-driver ({', '.join(missing)} not found; "
               "`apt-get install chromium chromium-driver`)")
        if os.environ.get("CQA_REQUIRE_BROWSER") == "1":  # CI: a missing browser is a failure, not a skip
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture()
def server(tmp_path, cli_env):
    env = {**cli_env, "CQA_DATA_DIR": str(tmp_path / "var")}
    subprocess.run(CQA + ["evaluate", "--benchmark", "semeval2016-test-B", "--ranker", "ir-baseline"],
                   env=env, check=True, capture_output=True, cwd=ROOT)
    port = free_port()
    from app.settings import Settings  # the automatic refresh as served by default (the tests' conftest: off)
    p = start_server(tmp_path, port, {"CQA_REFRESH_S": str(Settings.model_fields["refresh_s"].default)})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(p, base)
        yield base
    finally:
        p.terminate()
        p.wait(timeout=20)


def test_search_page_end_to_end(browser, server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(server + "/")
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "Ready"))
    assert browser.find_element(By.ID, "generation").text.startswith("gen-")
    assert "Search holds every stored thread" in browser.find_element(By.ID, "freshness").text
    panel = browser.find_element(By.ID, "evaluation")
    assert "semeval2016-test-B" in panel.text and "0.7475" in panel.text
    import re
    shown = re.search(r"0\.7475 \[(0\.\d{4}), (0\.\d{4})\]", panel.text)  # the run's 95% interval beside it
    assert shown and float(shown.group(1)) < 0.7475 < float(shown.group(2))
    from ranking.evaluation.runner import shipped_figures
    test_a = next(f for f in shipped_figures() if f["benchmark"] == "semeval2016-test-A")
    lo, hi = test_a["MAP_interval_95"]  # a shipped figure shows its interval too
    assert f"semeval2016-test-A: MAP {test_a['figures']['MAP']:.4f} [{lo:.4f}, {hi:.4f}]" in \
        browser.find_element(By.ID, "shipped").text
    img = panel.find_element(By.TAG_NAME, "img")
    browser.execute_script("arguments[0].scrollIntoView()", img)  # the chart loads lazily, when a reader gets to it
    wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 0)
    browser.execute_script("window.scrollTo(0, 0)")

    # An empty question is refused in plain words, without a request.
    browser.find_element(By.ID, "go").click()
    assert "type a question" in browser.find_element(By.ID, "error").text

    # Keyboard only: type, Enter submits; the explain button opens with Enter.
    browser.find_element(By.ID, "subject").send_keys("residence permit")
    body = browser.find_element(By.ID, "body")
    body.send_keys("How do I renew my residence permit and what documents do I need?")
    browser.find_element(By.ID, "subject").send_keys(Keys.ENTER)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results li")) == 10)
    assert not browser.find_element(By.ID, "error").is_displayed()
    first = browser.find_elements(By.CSS_SELECTOR, "#results li")[0]
    assert "rank 1" in first.text and "in thread" in first.text
    # the question typed brought the questions asked before (POST /search of the subject and the body written), each a
    # thread's link
    import json as json_
    import urllib.request as request_

    def similar(question: dict) -> list[str]:
        with request_.urlopen(request_.Request(server + "/search?feedback=false", data=json_.dumps(
                {"question": question, "target": "questions", "k": 5}).encode(),
                headers={"Content-Type": "application/json"})) as r:
            return [x["thread_title"] for x in json_.loads(r.read())["results"]]
    whole = similar({"subject": "residence permit",
                     "body": "How do I renew my residence permit and what documents do I need?"})

    def listed(d) -> list[str]:
        return [a.text for a in d.find_elements(By.CSS_SELECTOR, "#asked-list li a")]
    wait.until(lambda d: listed(d) == whole)
    asked = listed(browser)
    browser.find_element(By.CSS_SELECTOR, "#asked-list li a").click()  # opens on the page
    wait.until(lambda d: d.find_element(By.ID, "thread-title").text == asked[0])
    browser.find_element(By.ID, "thread-close").click()
    # each result shows its snippet, the question's words marked (as the index analyses them: same stem)
    hits = [m.text.lower() for m in browser.find_elements(By.CSS_SELECTOR, "#results li .text mark.hit")]
    assert hits and all(h.startswith(("residen", "permit", "renew", "document", "need")) for h in hits), hits
    # offsets count code points: an emoji before a marked word does not shift the mark
    said = browser.execute_script(
        "return marked({text: 'a \U0001F600 renewal b', start: 2, highlights: [[4, 11]]}, 'x a \U0001F600 renewal b c')")
    assert said == "… a \U0001F600 <mark class=\"hit\">renewal</mark> b …", said
    # two parts: the text goes on past the last one, not past the joined text's length from the first's start
    said = browser.execute_script(
        "return marked({text: 'visa … fee', start: 0, highlights: [[0, 4], [7, 10]], parts: [[0, 4], [20, 23]]}, "
        "'visa and a lot more fee')")
    assert said == "<mark class=\"hit\">visa</mark> … <mark class=\"hit\">fee</mark>", said
    assert "reranked by search-answers" in browser.find_element(By.ID, "summary").text
    explain = first.find_element(By.CSS_SELECTOR, "button.link")
    explain.send_keys(Keys.ENTER)
    box = first.find_element(By.CSS_SELECTOR, ".explain")
    wait.until(lambda d: box.is_displayed())
    assert "bm25" in box.text and "rerank" in box.text and "Expansion terms" in box.text
    assert explain.get_attribute("aria-expanded") == "true"
    browser.save_screenshot(str(tmp_path / "search.png"))
    assert (tmp_path / "search.png").stat().st_size > 10_000
    # the user says the second result helped and the first did not, then changes their mind on the first: the
    # judgements reach the feedback log under the search's id, the last one of a result replacing the earlier
    second = browser.find_elements(By.CSS_SELECTOR, "#results li")[1]
    second.find_element(By.CSS_SELECTOR, "button[data-helpful='true']").click()
    wait.until(lambda d: "marked helpful" in second.find_element(By.CSS_SELECTOR, ".judged").text)
    first.find_element(By.CSS_SELECTOR, "button[data-helpful='false']").click()
    wait.until(lambda d: "marked not helpful" in first.find_element(By.CSS_SELECTOR, ".judged").text)
    no = first.find_element(By.CSS_SELECTOR, "button[data-helpful='false']")
    assert no.get_attribute("aria-pressed") == "true"
    with request_.urlopen(server + "/evaluation/feedback") as r:
        (group,) = json_.loads(r.read())["groups"]
    assert group["reranker"] == "search-answers" and group["judgements"] == 2 and group["MAP"] == 0.5, group
    first.find_element(By.CSS_SELECTOR, "button[data-helpful='true']").click()
    wait.until(lambda d: first.find_element(By.CSS_SELECTOR, ".judged").text == "thanks: marked helpful")
    assert no.get_attribute("aria-pressed") == "false"
    with request_.urlopen(server + "/evaluation/feedback") as r:
        (group,) = json_.loads(r.read())["groups"]
    assert group["judgements"] == 2 and group["MAP"] == 1.0, group
    # More results: the next page (offset 10) appended, ranks 11-20, the results POST /search gives at k = 20
    browser.find_element(By.ID, "more").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results li")) == 20)
    asked = {"question": {"subject": "residence permit",
                          "body": "How do I renew my residence permit and what documents do I need?"}, "k": 20,
             "expand": False}
    with request_.urlopen(request_.Request(f"{server}/search", data=json_.dumps(asked).encode(),
                                           headers={"Content-Type": "application/json"})) as r:
        twenty = [x["id"] for x in json_.loads(r.read())["results"]]
    items = browser.find_elements(By.CSS_SELECTOR, "#results li")
    assert [li.find_element(By.CSS_SELECTOR, ".meta").text.split(" ")[1] for li in items] == twenty
    assert "rank 11" in items[10].text and "rank 20" in items[19].text
    assert browser.find_element(By.ID, "summary").text.startswith("20 results")
    assert browser.find_element(By.ID, "more").is_displayed()  # the demo corpus has more

    # The result's thread opens on the page: its question, then its comments most useful first, each with its place
    # in the thread, in the order GET /threads/{id}/answers gives (POST /rerank of the thread as stored).
    link = first.find_element(By.CSS_SELECTOR, ".meta a")
    thread_id = link.get_attribute("href").rsplit("/", 1)[1]
    link.click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#thread-comments li"))
    import json
    import urllib.parse
    import urllib.request
    with urllib.request.urlopen(f"{server}/threads/{thread_id}/answers") as r:
        ranked = [x["id"] for x in json.loads(r.read())["results"]]
    with urllib.request.urlopen(f"{server}/threads/{thread_id}") as r:
        stored = json.loads(r.read())
    place = {a["id"]: i for i, a in enumerate(stored["answers"], 1)}
    shown = browser.find_elements(By.CSS_SELECTOR, "#thread-comments li")
    assert [li.text.split("\n")[-1].split(" in the thread")[0] for li in shown] == [f"#{place[i]}" for i in ranked]
    assert "most useful first" in browser.find_element(By.ID, "thread-summary").text
    assert browser.switch_to.active_element == browser.find_element(By.ID, "thread-title")  # focus moved there
    assert urllib.parse.unquote(thread_id) == stored["id"]
    browser.save_screenshot(str(tmp_path / "thread.png"))
    # a reader says the second comment shown helped and the first did not: both judge the order the page showed
    shown[1].find_element(By.CSS_SELECTOR, "button[data-helpful='true']").click()
    wait.until(lambda d: "marked helpful" in shown[1].find_element(By.CSS_SELECTOR, ".judged").text)
    shown[0].find_element(By.CSS_SELECTOR, "button[data-helpful='false']").click()
    wait.until(lambda d: "marked not helpful" in shown[0].find_element(By.CSS_SELECTOR, ".judged").text)
    with urllib.request.urlopen(server + "/evaluation/feedback") as r:
        (comments,) = [g for g in json.loads(r.read())["groups"] if g["target"] == "comments"]
    assert comments["endpoint"] == "/threads/{id}/answers" and comments["judgements"] == 2, comments
    assert comments["MAP"] == 0.5 and comments["first_stage"]["order"] == "thread", comments
    # below it, its similar questions (GET /threads/{id}/similar), the thread itself left out; each opens in turn
    with urllib.request.urlopen(f"{server}/threads/{thread_id}/similar?k=5&target=questions&feedback=false") as r:
        similar = [x["thread_id"] for x in json.loads(r.read())["results"]]
    links = browser.find_elements(By.CSS_SELECTOR, "#thread-similar a")
    assert [a.get_attribute("data-thread") for a in links] == similar and len(similar) == 5
    assert stored["id"] not in similar
    links[0].click()
    wait.until(lambda d: d.find_element(By.ID, "thread-title").text != (stored["subject"] or stored["id"]))
    with urllib.request.urlopen(f"{server}/threads/{urllib.parse.quote(similar[0], safe='')}") as r:
        assert browser.find_element(By.ID, "thread-title").text == json.loads(r.read())["subject"].strip()
    browser.find_element(By.ID, "thread-close").click()
    assert not browser.find_element(By.ID, "thread").is_displayed()
    # what has no Helpful? buttons is kept nowhere: the questions asked before as the question was typed, and a
    # thread's similar questions (feedback=false); the searches and comment orders shown are
    import sqlite3
    with sqlite3.connect(tmp_path / "var" / "feedback.sqlite3") as db:
        kept = set(db.execute("SELECT endpoint, target FROM served"))
    assert kept == {("/search", "answers"), ("/threads/{id}/answers", "comments")}, kept
    # the reader unchecks "Helpful? buttons": the next search, its next page and a thread's comments are kept nowhere
    # (feedback=false) and show no buttons; the box stays unchecked on the next visit, until checked again
    with sqlite3.connect(tmp_path / "var" / "feedback.sqlite3") as db:
        rows = db.execute("SELECT count(*) FROM served").fetchone()[0]
    assert browser.find_element(By.ID, "keep").is_selected()  # no Global Privacy Control from this browser
    browser.find_element(By.ID, "keep").click()
    browser.find_element(By.ID, "go").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results li")) == 10)
    browser.find_element(By.ID, "more").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results li")) == 20)
    assert not browser.find_elements(By.CSS_SELECTOR, "#results button[data-helpful]")
    browser.find_elements(By.CSS_SELECTOR, "#results li .meta a")[0].click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#thread-comments li"))
    assert not browser.find_elements(By.CSS_SELECTOR, "#thread-comments button[data-helpful]")
    with sqlite3.connect(tmp_path / "var" / "feedback.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM served").fetchone()[0] == rows
    browser.refresh()
    wait.until(lambda d: d.find_element(By.ID, "keep"))
    assert not browser.find_element(By.ID, "keep").is_selected()
    # the service panel reports MAP on this forum's traffic: the judged searches and the judged comment order, each
    # beside the order before its ranker (GET /evaluation/feedback)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#feedback-groups li")) == 2)
    panel = browser.find_element(By.ID, "feedback").text
    assert "/search answers (search-answers): MAP 1.0000" in panel and "before the reranker" in panel, panel
    assert "/threads/{id}/answers comments" in panel and "MAP 0.5000" in panel and "in the thread's order" in panel
    # a challenger running on the forum's traffic is named beside the ranker it is interleaved with
    said = browser.execute_script(
        "const d = document.createElement('div'); d.innerHTML = serviceSummary({generation: 'g', sizes: {documents: 3},"
        " search_rerankers: {answers: 'search-answers', questions: 'search-questions'}, search_challengers: {answers:"
        " 'bm25'}, reranker: 'cascade', comments_challenger: 'bilstm+signals', interleave_share: 0.5, refresh: null});"
        " return d.textContent.replace(/\\s+/g, ' ')")
    assert "answers search-answers (interleaved with bm25 for 50%), questions search-questions," in said, said
    assert "thread comments (/rerank) cascade (interleaved with bilstm+signals for 50%)" in said, said
    browser.find_element(By.ID, "keep").click()  # checked again, as the rest of this test expects
    browser.find_element(By.ID, "subject").send_keys("residence permit")
    body = browser.find_element(By.ID, "body")  # the page's new elements, after the visit
    body.send_keys("How do I renew my residence permit and what documents do I need?")
    browser.find_element(By.ID, "go").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results li button[data-helpful='true']")) == 10)
    first = browser.find_elements(By.CSS_SELECTOR, "#results li")[0]


    # A narrow screen stacks the service panel under the results.
    browser.set_window_size(420, 900)
    time.sleep(0.3)
    main_box = browser.find_element(By.CSS_SELECTOR, "section").rect
    aside_box = browser.find_element(By.CSS_SELECTOR, "aside").rect
    assert aside_box["y"] > main_box["y"] + main_box["height"] - 1
    browser.save_screenshot(str(tmp_path / "narrow.png"))

    # Arabic reads right to left where it is typed and where it is shown; English stays left to right.
    rtl = "return arguments[0].matches(':dir(rtl)')"
    assert not browser.execute_script(rtl, body)
    assert not browser.execute_script(rtl, first.find_element(By.CSS_SELECTOR, ".text"))
    body.clear()
    body.send_keys("ما هو الحد الأدنى للراتب لكفالة العائلة؟")
    assert browser.execute_script(rtl, body)
    # a result in Arabic, as the page renders one (its own renderResult), read right to left
    shown = browser.execute_script(
        "const li = renderResult({text: arguments[0], kind: 'answer', id: 'a1', thread_id: 't1', rank: 1, score: 1},"
        " 99); document.body.append(li); return li.querySelector('.text').matches(':dir(rtl)')", "ما هو الحد الأدنى")
    assert shown
    # what a StackExchange forum says of a result (round 59): the asker's acceptance and the votes, where it says them
    metas = browser.execute_script(
        "return [{kind: 'answer', accepted: true, votes: 30}, {kind: 'question', accepted: true, votes: 1},"
        " {kind: 'answer', accepted: false, votes: -2}, {kind: 'answer'}].map((x, k) => renderResult({text: 'x',"
        " id: 'r' + k, thread_id: 't1', rank: 1, score: 1, ...x}, 90 + k).querySelector('.meta').textContent)")
    assert "✓ accepted · 30 votes" in metas[0] and "✓ has an accepted answer · 1 vote ·" in metas[1]
    assert "accepted" not in metas[2] and "-2 votes" in metas[2]
    assert "accepted" not in metas[3] and "vote" not in metas[3]

    # A StackExchange forum's thread (as `cqa ingest` of its dump stores it), opened by /?thread=ID: its tags, the
    # questions it was closed as a duplicate of (each opens in turn; one not stored is named as such), and the comment
    # the asker accepted.
    from .test_api import TOKEN
    original = {"id": "se1", "subject": "Renewing a permit", "body": "How?", "meta": {"tags": ["visa", "permits"]},
                "answers": [{"id": "se1a", "text": "At the ministry.", "meta": {"accepted": True}},
                            {"id": "se1b", "text": "Online, I think."}]}
    repost = {"id": "se2", "subject": "Permit renewal", "body": "How again?",
              "meta": {"tags": ["visa"], "duplicate_of": ["se1", "gone"]}}
    request = urllib.request.Request(f"{server}/threads", data=json.dumps({"threads": [original, repost]}).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request) as r:
        assert r.status == 200
    browser.get(server + "/?thread=se2")
    wait.until(lambda d: d.find_elements(By.ID, "thread-duplicate-of"))
    assert browser.find_element(By.ID, "thread-title").text == "Permit renewal"
    assert browser.find_element(By.ID, "thread-tags").text == "tags: visa"
    assert browser.find_element(By.ID, "thread-duplicate-of").text == \
        "Closed as a duplicate of Renewing a permit, gone (not stored here)"
    browser.find_element(By.CSS_SELECTOR, "#thread-duplicate-of a").click()
    wait.until(lambda d: d.find_element(By.ID, "thread-title").text == "Renewing a permit")
    assert browser.find_element(By.ID, "thread-tags").text == "tags: visa, permits"
    marked = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#thread-comments li") if "accepted" in li.text]
    assert len(marked) == 1 and marked[0].startswith("At the ministry.") and "accepted by the asker" in marked[0]

    # A tag of the thread's page narrows later searches to the threads that carry it: once the automatic refresh has
    # indexed the two threads, a search within "permits" finds se1's comments only.
    browser.find_element(By.CSS_SELECTOR, "#thread-tags button[data-tag='permits']").click()
    assert browser.find_element(By.ID, "tags").get_attribute("value") == "permits"
    suggested = [o.get_attribute("value") for o in browser.find_elements(By.CSS_SELECTOR, "#tag-list option")]
    assert suggested == [], suggested  # the demo corpus's threads carry no tags, and these two are not indexed yet
    assert "only at threads tagged permits" in browser.find_element(By.ID, "summary").text
    ask = json.dumps({"question": "renew permit ministry", "filters": {"tags": ["permits"]}}).encode()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with urllib.request.urlopen(urllib.request.Request(
                f"{server}/search", data=ask, headers={"Content-Type": "application/json"})) as r:
            if json.load(r)["results"]:
                break
        time.sleep(1)
    body = browser.find_element(By.ID, "body")
    body.clear()
    body.send_keys("How do I renew my permit at the ministry?")
    browser.find_element(By.ID, "go").click()
    wait.until(lambda d: "results in" in d.find_element(By.ID, "summary").text)
    threads = {a.text for a in browser.find_elements(By.CSS_SELECTOR, "#results li .meta a")}
    assert threads == {"Renewing a permit"}, threads
    assert all("tags permits, visa" in li.text for li in browser.find_elements(By.CSS_SELECTOR, "#results li"))
    browser.find_element(By.ID, "tags").send_keys(", " + ", ".join(f"t{i}" for i in range(10)))
    browser.find_element(By.ID, "go").click()
    assert "at most 10 tags" in browser.find_element(By.ID, "error").text
    tags = browser.find_element(By.ID, "tags")  # a tag after a minus sign: no thread that carries it
    tags.clear()
    tags.send_keys("visa, -permits")
    browser.find_element(By.ID, "go").click()
    wait.until(lambda d: "No results" in d.find_element(By.ID, "summary").text)  # se2, visa alone: no comments
    assert "fewer tags" in browser.find_element(By.ID, "summary").text
    assert browser.execute_script("return window.lastSearch.filters") == {"tags": ["visa"], "exclude_tags": ["permits"]}
    # "a|b": one of them at least, each such entry a group to be met, beside tags and tags left out
    assert browser.execute_script("""const field = $("tags"), was = field.value;
        field.value = "visa, Renewal | permits, -cars, family|renewal, permits|Renewal|"; const f = tagFilters();
        field.value = was; return f;""") == {"tags": ["visa"], "exclude_tags": ["cars"], "tag_groups": [
            ["Renewal", "permits"], ["family", "renewal"], ["permits", "Renewal"]]}
    browser.get(server + "/")  # the page loaded again suggests the tags the generation now holds
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#tag-list option"))
    assert [(o.get_attribute("value"), o.get_attribute("textContent"))
            for o in browser.find_elements(By.CSS_SELECTOR, "#tag-list option")] \
        == [("visa", "2 threads"), ("permits", "1 thread")]
    # as a tag is typed after others, the suggestions complete it (GET /tags?prefix=), a "-" kept
    browser.find_element(By.ID, "tags").send_keys("permits, -VI")
    wait.until(lambda d: d.execute_script(  # read at once: the list is written anew at each key
        "return [...document.querySelectorAll('#tag-list option')].map(o => o.value)") == ["permits, -visa"])
    browser.find_element(By.ID, "tags").clear()
    # a result's tag is a button too: it narrows the next search to that tag
    body = browser.find_element(By.ID, "body")
    body.clear()
    body.send_keys("How do I renew my permit at the ministry?")
    browser.find_element(By.ID, "go").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#results li button[data-tag='permits']"))
    browser.find_element(By.CSS_SELECTOR, "#results li button[data-tag='permits']").click()
    assert browser.find_element(By.ID, "tags").get_attribute("value") == "permits"
    explain = browser.find_element(By.CSS_SELECTOR, "#results li .meta button:not([data-tag])")
    assert explain.text == "explain"

    # The page's own api() run on an error answer the service gives (a real one cannot be caused from outside): what
    # its user is told.
    def told(error: dict, headers: dict | None = None) -> str:
        return browser.execute_async_script("""
            const [error, headers, done] = arguments, real = window.fetch;
            window.fetch = async () => new Response(JSON.stringify({error}), {status: error.status, headers});
            api("/search", {method: "POST"}).then(() => done("no error"), e => { window.fetch = real; done(e.message); });""",
                                            error, headers or {})
    # A 500 (the service's own fault): the message names the request's id, which finds the operator's log line.
    said = told({"status": 500, "code": "internal_error", "message": "internal error; the server log has the details",
                 "request_id": "r-42"}, {"Content-Type": "application/json", "X-Request-ID": "r-42"})
    assert said == ("internal error; the server log has the details (request id r-42: the operator finds what went "
                    "wrong by it)")
    # a busy worker's 503 (CQA_MAX_IN_FLIGHT) is not an index that is not ready
    said = told({"status": 503, "code": "overloaded", "message": "this worker is answering 32 ranking requests already"})
    assert said == "The service is busy: this worker is answering 32 ranking requests already"
    # a client past its share (CQA_FAIR_SHARE): the user is told to wait, not that the service is broken
    said = told({"status": 429, "code": "over_share", "message": "this client (203.0.113.9) has 16 ranking requests ..."})
    assert said == "Too many searches from your address at once: wait a moment and search again."
