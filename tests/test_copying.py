"""The copy metric (evals/copying.py) on hand-made transcripts: an exact copy, a garbled one, a
fragment Grep, no mention, a path; the symbols of a small project on disk; the summary's shares."""
from evals.copying import (
    channels, copy_report, edit_distance, is_garble, project_symbols, request_names, summarize, word_runs)

SYMBOLS = {"moving_average", "parse_header", "stats", "pkg", "pkg.stats", "pkg/stats.py",
           "tests/test_stats.py", "test_stats", "mean", "axolotllib"}
REQUEST = "why does moving_average drop the last window?"


def call(thought: str, name: str, **args) -> dict:
    return {"role": "assistant", "content": thought, "tool_call": {"name": name, "args": args}}


def transcript(*steps: dict, answer: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": "you are an agent; moving_avg is not yours"},
                {"role": "user", "content": REQUEST}]
    for step in steps:
        messages += [step, {"role": "tool_result", "content": "def movng_average(values):"}]
    if answer is not None:
        messages.append({"role": "assistant", "content": answer})
    return messages


def test_project_symbols(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "stats.py").write_text(
        "class Window:\n    def slide(self):\n        pass\n\n\nasync def moving_average(xs):\n    pass\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_stats.py").write_text("def test_mean():\n    pass\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    (tmp_path / "README.md").write_text("def not_a_symbol(): pass\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "hook.py").write_text("def hidden():\n    pass\n")
    assert project_symbols(str(tmp_path)) == {
        "pkg/__init__.py", "pkg", "pkg/stats.py", "stats", "pkg.stats", "Window", "slide",
        "moving_average", "tests/test_stats.py", "test_stats", "tests.test_stats", "test_mean",
        "broken.py", "broken"}


def test_request_names_in_order_once_and_through_paths():
    request = "compare `parse_header` with moving_average in pkg/stats.py, then parse_header. see stats.py"
    assert request_names(request, SYMBOLS) == ["parse_header", "moving_average", "pkg/stats.py", "stats"]
    assert request_names("summarize the newest git log entry", SYMBOLS) == []
    assert request_names("open ./tests/test_stats.py: it fails", SYMBOLS) == ["tests/test_stats.py"]


def test_channels_split_thoughts_args_and_answer():
    messages = transcript(call("let me find `moving_average`.", "Grep", pattern="def moving_average\\("),
                          answer="it drops it")
    assert channels(messages) == {"thought": "let me find `moving_average`.",
                                  "args": "def moving_average(", "answer": "it drops it"}


def test_exact_copy_everywhere():
    messages = transcript(call("let me find `moving_average`.", "Grep", pattern="def moving_average\\("),
                          answer="`moving_average` slices one short.")
    r = copy_report(REQUEST, messages, SYMBOLS)
    assert r["names"] == 1 and r["exact_any"] == 1 and r["attempted"] == 1
    for channel in ("thought", "args", "answer"):
        assert r[channel] == {"exact": 1, "garbled": 0, "garbled_only": 0}
    assert r["names_list"] == [{"name": "moving_average", "thought": "exact", "args": "exact",
                                "answer": "exact", "garbles": {}}]


def test_garbled_copy_is_counted_per_channel():
    messages = transcript(call("let me find movng_average.", "Grep", pattern="def moving_average\\("))
    r = copy_report(REQUEST, messages, SYMBOLS)
    assert r["thought"] == {"exact": 0, "garbled": 1, "garbled_only": 1}
    assert r["args"] == {"exact": 1, "garbled": 0, "garbled_only": 0}
    assert r["answer"] == {"exact": 0, "garbled": 0, "garbled_only": 0}
    assert r["exact_any"] == 1 and r["attempted"] == 1
    assert r["names_list"][0]["garbles"] == {"thought": "movng_average"}


def test_fragment_grep_is_garbled_but_an_english_word_is_not():
    messages = transcript(call("the moving average is computed here", "Grep", pattern="def moving\\("))
    r = copy_report(REQUEST, messages, SYMBOLS)
    assert r["args"]["garbled_only"] == 1 and r["thought"]["garbled"] == 0
    assert r["exact_any"] == 0 and r["attempted"] == 1
    # in backticks the same word is an attempt at the name
    r = copy_report(REQUEST, transcript(call("let me find `moving`.", "Bash", command="ls")), SYMBOLS)
    assert r["thought"]["garbled_only"] == 1


def test_no_mention_is_no_attempt():
    messages = transcript(call("let me run the tests.", "Bash", command="python -m pytest -q"),
                          answer="all 7 tests pass.")
    r = copy_report(REQUEST, messages, SYMBOLS)
    assert r["names"] == 1 and r["attempted"] == 0 and r["exact_any"] == 0
    assert all(r[c]["exact"] == r[c]["garbled"] == 0 for c in ("thought", "args", "answer"))
    assert copy_report("run the tests", messages, SYMBOLS)["names"] == 0


def test_symbols_request_words_and_language_words_are_never_garbles():
    request = "rename moving_average to moving_averages"
    messages = transcript(call("", "Grep", pattern="def moving_averages\\(|mean|def \\w+"))
    r = copy_report(request, messages, SYMBOLS)
    assert r["args"]["garbled"] == 0  # moving_averages: the request's; mean: a symbol; def: Python's


def test_a_garble_counts_for_the_nearest_requested_name_only():
    symbols = {"yarn_totals", "test_yarn_totals", "tests/test_yarn_totals.py"}
    request = "add test_yarn_totals for yarn_totals"
    r = copy_report(request, transcript(call("", "Grep", pattern="def isarn_totals\\(")), symbols)
    assert [(row["name"], row["args"]) for row in r["names_list"]] == [
        ("test_yarn_totals", None), ("yarn_totals", "garbled")]


def test_path_names_absolute_paths_and_garbled_paths():
    request = "look at pkg/stats.py and the axolotllib package"
    exact = transcript(call("reading pkg/stats.py", "Read", file_path="/tmp/proj/pkg/stats.py"))
    r = copy_report(request, exact, SYMBOLS)
    assert request_names(request, SYMBOLS) == ["pkg/stats.py", "axolotllib"]
    assert r["thought"]["exact"] == 1 and r["args"]["exact"] == 1 and r["args"]["garbled"] == 0
    garbled = transcript(call("reading pkg/stat.py", "Bash", command="ls slotllib && cat /tmp/proj/pkg/sats.py"))
    r = copy_report(request, garbled, SYMBOLS)
    assert [(row["name"], row["thought"], row["args"]) for row in r["names_list"]] == [
        ("pkg/stats.py", "garbled", "garbled"), ("axolotllib", None, "garbled")]
    assert not copy_report(request, transcript(call("", "Read", file_path="pkg/stats.pyc")),
                           SYMBOLS)["args"]["exact"]


def test_garble_rules():
    assert edit_distance("kitten", "sitting") == 3 and edit_distance("", "abc") == 3
    assert word_runs("parse_header_line") == {"parse_header", "header_line"}
    assert word_runs("parseHeaderLine") == {"parseHeader", "HeaderLine"} and word_runs("AbaloneTracker") == set()
    assert is_garble("movng_average", "moving_average")  # rule 1
    assert is_garble("slotllib", "axolotllib")  # rule 2
    assert is_garble("moving", "moving_average") and is_garble("header_line", "parse_header_line")  # rule 3
    assert not is_garble("average", "moving_average")  # one inner word
    assert not is_garble("mo", "moving_average") and not is_garble("moving_average", "moving_average")
    assert not is_garble("lookup_table", "moving_average")


def test_summarize_shares():
    reports = [copy_report(REQUEST, transcript(call("movng_average", "Grep", pattern="def moving_average\\(")),
                           SYMBOLS),
               copy_report(REQUEST, transcript(call("", "Grep", pattern="def moving\\(")), SYMBOLS),
               copy_report(REQUEST, transcript(call("", "Bash", command="ls")), SYMBOLS)]
    s = summarize(reports)
    assert s["reports"] == 3 and s["names"] == 3
    assert s["thought"] == {"exact": 0, "garbled": 1, "garbled_only": 1, "share": 0.0}
    assert s["args"] == {"exact": 1, "garbled": 1, "garbled_only": 1, "share": 0.5}
    assert s["answer"]["share"] is None
    assert s["overall"] == {"exact": 1, "garbled_only": 2, "share": round(1 / 3, 4)}
    assert s["exact_any"] == 1 and s["attempted"] == 2 and s["names_share"] == 0.5
    assert summarize([])["overall"]["share"] is None


def test_a_grep_patterns_escapes_are_not_part_of_the_name():
    messages = [{"role": "assistant", "content": "searching.",
                 "tool_call": {"name": "Grep", "args": {"pattern": "\\bmoving_average\\("}}},
                {"role": "assistant", "content": "found it", "tool_call": {"name": "Grep",
                 "args": {"pattern": "(from|import) pkg\\.stats\\b"}}}]
    report = copy_report("who calls moving_average? and who imports pkg.stats?", messages,
                         {"moving_average", "pkg.stats", "pkg/stats.py", "stats"})
    assert report["args"]["exact"] == 2 and report["args"]["garbled"] == 0
