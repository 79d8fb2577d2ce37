"""The two request grammars' tables (tasks/requests.py words requests with them): TRAINING, the
words synth's conversations use, and HELDOUT, other words that only eval tasks use. Every
[bracketed] fragment of HELDOUT is a phrase no training request contains (tests check it), and
HELDOUT keeps clear of most of TRAINING's verbs: a held-out eval asks in words the model never saw.

Trade-off: word lists, not a language model. TRAINING is kept wide (several verbs and registers
per intent) so that a small model learns to read the intent from the slots and the request's
shape rather than from one verb; docs/LOG.md records whether that carries to held-out words.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Grammar:
    """The content of one grammar. cores: intent -> kind -> '|'-separated templates, where kind
    is "ask" (a question, written without its '?'), "do" (an imperative that politeness may wrap)
    or "say" (a whole statement, used as written); {slot} is a slot, [words] a held-out fragment."""
    cores: dict[str, dict[str, str]]
    openers: tuple[str, ...]      # context before the core: "hey, ", "i'm new to this repo. "
    asks: tuple[str, ...]         # turn an imperative into a question: "can you "
    please: tuple[str, ...]       # before an imperative
    closers: tuple[str, ...]      # after an imperative or a statement: "", ".", " thanks"
    trailers: tuple[str, ...]     # a remark after a finished sentence: "no rush."


TRAINING = Grammar(cores={
    "find_definition": dict(
        ask="where is {fn} defined|where's {fn}|where does {fn} live|in which module is {fn} "
            "defined|which file and line define {fn}|where can i find the code for {fn}|what file "
            "is {fn} in|where's the def of {fn}|which module defines {fn}|where is {fn} "
            "declared|where did {fn} get defined|which source file has {fn}|where is the function "
            "{fn}|do you know where {fn} is|where would i find {fn}|which module contains the code "
            "of {fn}|where is {fn} implemented|what's the path to {fn}",
        do="find the definition of {fn}|locate {fn} for me|find {fn}|show me where {fn} is "
           "defined|find where {fn} lives in this repo|look up {fn}|show me the definition of "
           "{fn}|find the file that defines {fn}|tell me where {fn} is defined|go find {fn}|search "
           "the repo for the definition of {fn}|give me the file and line of {fn}|jump to "
           "{fn}|open the definition of {fn}|show me the code of {fn}|pin down where {fn} is "
           "defined|figure out where {fn} is defined",
        say="which file has {fn} in it? i need the line too|i can't find {fn}. where is "
            "it?|{fn}?|{fn} - where does it live?|def of {fn}?|looking for {fn}. which file?|need "
            "the location of {fn}|trying to find {fn} in this project|where's {fn} at?|can't "
            "locate {fn} anywhere. help?|{fn} - file and line?|got lost looking for {fn}"),
    "find_class": dict(
        ask="where is the {cls} class defined|which file defines {cls}|where's the {cls} class|in "
            "which file is {cls} declared|where does class {cls} live|what file is class {cls} "
            "in|where can i find class {cls}|which module declares {cls}|what's the file for the "
            "{cls} class|where is {cls} implemented",
        do="find class {cls}|locate class {cls}|find the {cls} class|show me where class {cls} is "
           "defined|look up class {cls}|tell me where class {cls} is defined|search for the class "
           "{cls}|give me the file of class {cls}|open the {cls} class|figure out where {cls} is "
           "defined",
        say="class {cls}?|i need the {cls} class. which file is it in?|{cls} - which file defines "
            "it?|looking for the {cls} class|class {cls} - file and line?|can't find class {cls}. "
            "where is it?"),
    "explain": dict(
        ask="what does {fn} do|what does {fn} in {file} do|how does {fn} work|what is {fn} "
            "for|what's the purpose of {fn}|what is {fn} supposed to do|what's {fn} in {file} "
            "for|what does {fn} return|how does {fn} in {file} work|what is {fn} used for|can you "
            "tell me what {fn} does|what is {fn} responsible for|how does {fn} behave|what does "
            "calling {fn} give me|what is the point of {fn} in {file}",
        do="explain {fn} briefly|explain {fn}|explain what {fn} in {file} does|tell me what {fn} "
           "returns|describe what {fn} does|summarize {fn} for me|help me understand {fn}|read "
           "{fn} and tell me what it does|explain {fn} from {file}|break down {fn} for me|go over "
           "what {fn} does|describe {fn} in a few words|explain how {fn} works|tell me about "
           "{fn}|look at {fn} and explain it|give me a short explanation of {fn}|describe {fn} in "
           "{file}|outline what {fn} does",
        say="quick question: what is {fn} for?|i don't understand {fn}. what does it do?|{fn} in "
            "{file} confuses me. what does it do?|what's {fn} about?|not sure what {fn} does. "
            "explain?|trying to understand {fn} in {file}|{fn} - what is it for?|need a quick "
            "explanation of {fn}|so what does {fn} really do?"),
    "fix_bug": dict(
        do="fix the failing test|make the tests pass again|fix {fn}|fix the bug in {fn}|fix the "
           "bug {test} catches|find the bug and fix it|fix the code so the tests pass|debug {fn} "
           "and fix it|correct the bug in {fn}|figure out why {test} fails and fix it|correct {fn} "
           "so {test} passes|patch {fn}|make {test} pass|fix what breaks {test}",
        say="the tests are failing, can you fix it?|{test} fails, please fix the bug|something is "
            "wrong with {fn}, the tests catch it. fix it|tests broke after the last commit. fix "
            "the code, not the tests|{fn} is returning the wrong thing, fix it|a test is failing, "
            "please fix it|pytest fails. find the bug and fix it|{test} is red, find the bug and "
            "fix it|there's a bug in {fn}, please fix it|something broke and the suite fails. can "
            "you fix it?|the tests are failing, fix it|{test} fails. fix {fn}|{fn} has a bug and "
            "{test} shows it. fix it|{test} is failing, fix the code please|the build is red "
            "because of {fn}. fix it|there's a failing test, go fix the bug|{fn} is broken. make "
            "the tests pass|i think {fn} has a bug; the tests fail. fix it|{test} doesn't pass "
            "anymore. fix {fn}|the test run fails. fix the cause"),
    "implement_stub": dict(
        do="implement {fn} in {file}|write the body of {fn}; the docstring says what it should "
           "do|implement {fn}|write the missing body of {fn}|finish the implementation of "
           "{fn}|complete {fn} in {file}|implement the stub {fn}|write {fn} in {file} from its "
           "docstring|fill in {fn}|write the code for {fn}|implement the missing {fn}|implement "
           "{fn} so the tests pass|finish {fn}|write the implementation of {fn} in {file}",
        say="{fn} is just a stub, write it|{fn} raises NotImplementedError, implement it so the "
            "tests pass|{fn} isn't implemented yet, do it|{fn} only raises NotImplementedError. "
            "implement it|code up {fn} from its docstring|{fn} in {file} is a stub. implement "
            "it|{fn} has no body yet. write it|{fn} is unfinished, please complete it|{fn} still "
            "raises NotImplementedError. write it|need {fn} implemented"),
    "rename_symbol": dict(
        do="rename {fn} to {new} everywhere|rename {fn} -> {new}, including the tests|rename {fn} "
           "to {new}|rename {fn} to {new} and update the callers|change the name of {fn} to "
           "{new}|change {fn} to {new} everywhere|rename the function {fn} to {new}|replace the "
           "name {fn} with {new} everywhere|rename every use of {fn} to {new}",
        say="{fn} should be called {new}. rename it everywhere|i'd rather call {fn} {new}; rename "
            "it, tests included|the name {fn} is unclear, rename it to {new}|{new} is a better "
            "name than {fn}. rename it|let's rename {fn} to {new}, tests too"),
    "add_parameter": dict(
        do="add a {param} parameter to {fn} with default {default}|add an optional {param} "
           "argument to {fn}, defaulting to {default}|add {param}={default} to the signature of "
           "{fn}|add a keyword argument {param} to {fn} (default {default})|make {fn} take {param} "
           "(default {default})|add the parameter {param} to {fn}, default {default}|put a {param} "
           "argument on {fn} with default {default}",
        say="give {fn} an optional {param} argument (default {default})|{fn} needs a {param} "
            "parameter; add it with default {default}|i want to pass {param} to {fn}. add it, "
            "default {default}|add {param} to {fn}; its default is {default}"),
    "create_test": dict(
        do="add a test file {test} for {fn}|write tests for {fn} in {test}|create {test} with a "
           "couple of tests for {fn}|add some pytest tests for {fn} in {test}|cover {fn} with "
           "tests in {test}|write a test module {test} for {fn}|write unit tests for {fn} in "
           "{test}|make a test file {test} that checks {fn}|put tests for {fn} into {test}|add "
           "unit tests for {fn} as {test}",
        say="i need tests for {fn}; put them in {test}|{fn} is missing tests. add some in "
            "{test}|{fn} is untested; write tests for it in {test}|please add tests for {fn} in "
            "{test}"),
    "create_module": dict(
        do="add a module {file} with a function {fn} that does this: {doc}|create {file} "
           "containing {fn}(): {doc}|make a new module {file} with {fn}: {doc}|write {fn} in a new "
           "file {file}. it should {doc}|create a module {file} with one function, {fn}, to "
           "{doc}|create a new file {file} with a function {fn} that should {doc}|add {file} with "
           "{fn}: {doc}|write a new module {file} whose function {fn} does this: {doc}",
        say="new file {file}: a function {fn}. {doc}|i need a new module {file} with a function "
            "{fn} that should {doc}. please create it|please create {file} with a function {fn}: "
            "{doc}"),
    "run_tests": dict(
        ask="do the tests pass|are the tests passing|what does the test suite say|are all the "
            "tests green|is the suite green|does pytest pass|are the tests ok|is everything "
            "passing|do all tests pass|does the test suite pass|is pytest passing|are there "
            "failing tests|did anything break in the tests",
        do="run the tests|run the test suite and tell me the result|run pytest|check whether the "
           "tests are green|run pytest and report back|run the unit tests|run the whole test "
           "suite|check if the tests pass|execute the tests|launch pytest|start the test run|run "
           "the tests and tell me what fails|go ahead and run the tests|run pytest and tell me the "
           "outcome|try the tests|give the tests a run|run the tests for me|check the test "
           "results|run all the tests|execute pytest|run the test suite, please report|trigger the "
           "tests",
        say="tests?|are we green? run the tests|let's see if the tests pass|time to run the "
            "tests|tests - passing or not?|need to know if the tests pass. run them|run pytest, i "
            "want to see the result"),
    "line_count": dict(
        ask="how many lines is {file}|what's the line count of {file}|how long is {file}|number of "
            "lines in {file}|lines in {file}|how many lines does {file} have|what's the line total "
            "of {file}|how many lines are in {file}|how big is {file}|what's the size of {file} in "
            "lines",
        do="count the lines in {file}|tell me how many lines {file} has|give me the line count of "
           "{file}|check how long {file} is|count how many lines {file} has|report the line count "
           "of {file}|measure {file} in lines|get me the number of lines in {file}",
        say="{file}: how many lines?|line count of {file}?|how many lines in {file}?|need the line "
            "count for {file}|{file} line count please"),
    "list_files": dict(
        ask="what modules are in {pkg}|which modules does {pkg} have|what's inside {pkg}|what "
            "python files are in {pkg}|what files does {pkg} contain|what's in the {pkg} "
            "package|which files live in {pkg}|what does {pkg} consist of|what modules make up "
            "{pkg}",
        do="list the files in the {pkg} package|show me what's in {pkg}/|list {pkg}'s modules|list "
           "the modules of {pkg}|show the contents of the {pkg} package|show me the modules in "
           "{pkg}|list what's inside {pkg}|enumerate the files of {pkg}|tell me which files are in "
           "{pkg}|list everything in {pkg}",
        say="{pkg} - what's in it?|ls {pkg}?|contents of {pkg}?|need a list of the {pkg} "
            "modules|{pkg} - which files?"),
    "git_last": dict(
        ask="what was the last commit|what did the latest commit do|what's the latest commit|what "
            "changed in the most recent commit|which commit is the latest|what is the most recent "
            "commit|what did the last commit change|what was committed last|what's the latest "
            "commit about",
        do="show me the most recent commit|show the last commit|describe the last commit|tell me "
           "about the last commit|summarize the latest commit|tell me what the last commit "
           "did|describe the most recent commit|show me the latest commit|explain the last "
           "commit|give me the last commit's message",
        say="last commit?|latest commit - what is it?|what's the last commit?|need to know what "
            "the latest commit was|most recent commit?"),
    "git_changes": dict(
        ask="what have i changed since the last commit|what's uncommitted right now|which files "
            "did i modify|is there anything uncommitted|what's modified in the repo|did i change "
            "anything since the last commit|which files have uncommitted changes|do i have "
            "uncommitted changes|what's not committed yet|what files have i touched|are there "
            "changes i haven't committed|what's different from the last commit",
        do="show me my uncommitted changes|list my uncommitted changes|show the working tree "
           "changes|tell me what i've changed|list the files i changed|show what's modified|check "
           "for uncommitted changes|tell me which files are modified|show me the diff against the "
           "last commit",
        say="git status?|anything uncommitted?|anything modified?|any local changes?|what did i "
            "change?"),
    "git_count": dict(
        ask="how many commits does this repo have|how long is the git history|how many commits are "
            "there|how many commits in the git log|how many commits are in the history|what's the "
            "commit count|how many commits has this project had",
        do="count the commits|count the commits in this repo|tell me how many commits there "
           "are|tell me the number of commits|count how many commits this repo has|find out how "
           "many commits there are",
        say="number of commits?|commit count?|how many commits?|total commits?"),
    "recover_path": dict(
        ask="what does {fn} in {wrong} do|what is {fn} in {wrong}|how does {fn} in {wrong} work",
        do="look at {wrong} and tell me what {fn} does|read {wrong} and explain {fn}|explain {fn} "
           "from {wrong}|check {wrong} and tell me what {fn} is for|open {wrong} and explain "
           "{fn}|look in {wrong} and describe {fn}|go to {wrong} and tell me about {fn}",
        say="open {wrong}, what does {fn} do?|{fn} is in {wrong}, i think. what does it do?|{fn} "
            "lives in {wrong}, right? explain it|i believe {fn} is in {wrong}. what is it for?"),
    "recover_cmd": dict(
        ask="do the tests in {module} pass|are the {module} tests passing|are the tests of "
            "{module} ok|does {module} pass its tests",
        do="run the tests for {module}|run the {module} tests|run only the {module} tests|run just "
           "the {module} tests|execute the {module} tests|launch the tests of {module}|test "
           "{module} only|run the tests in {module}",
        say="just the tests of {module}, please|{module} tests - do they pass?|only the {module} "
            "tests please|check {module}'s tests"),
    "rejects_run": dict(
        ask="do the tests pass|are the tests passing|is everything passing",
        do="run the tests|run the test suite|run pytest|run the tests now|execute the tests|launch "
           "pytest|run all the tests|start the test run"),
    "rejects_edit": dict(
        do="implement {fn}|write the body of {fn}|implement the stub {fn}|fill in {fn}|write the "
           "code for {fn}|finish {fn}",
        say="fill in {fn}, it's a stub|write {fn}, it's only a stub|{fn} needs a body, write "
            "it|implement {fn}, it's unfinished"),
    "find_callers": dict(
        ask="who calls {fn}|where is {fn} used|which functions call {fn}|where is {fn} called "
            "from|what calls {fn}|is {fn} used anywhere|what uses {fn}|who relies on {fn}|which "
            "code calls {fn}|where does {fn} get called|which functions use {fn}|what code calls "
            "{fn}",
        do="find the callers of {fn}|list every call site of {fn}|show me where {fn} is "
           "called|find all uses of {fn}|show the callers of {fn}|list the callers of {fn}|find "
           "everything that calls {fn}|search for calls to {fn}|tell me who calls {fn}|find where "
           "{fn} gets called",
        say="callers of {fn}?|{fn} - who uses it?|need the callers of {fn}|who's calling "
            "{fn}?|{fn} - where is it used?"),
    "find_importers": dict(
        ask="which files import {module}|who imports {module}|what imports {module}|where is "
            "{module} imported|which modules import {module}|where does {module} get imported|who "
            "uses {module}|which files use {module}",
        do="list the files that import {module}|find every import of {module}|show me which "
           "modules import {module}|find the files importing {module}|list the importers of "
           "{module}|search for imports of {module}|tell me which files import {module}",
        say="importers of {module}?|{module} - who imports it?|who imports {module}?|need the "
            "files that import {module}"),
    "explain_file": dict(
        ask="what is {file} for|what does {file} do|what's in {file}|what's the purpose of "
            "{file}|what's {file} about|what does the file {file} contain|what is {file} used "
            "for|how does {file} fit in",
        do="explain {file}|describe what {file} does|summarize {file}|tell me what {file} is "
           "for|give me an overview of {file}|describe {file}|tell me about {file}|read {file} and "
           "explain it|give me a summary of {file}|explain what {file} is for",
        say="{file} - what is it for?|i'm new here. what does {file} do?|what is {file}?|{file} - "
            "explain it to me|need an overview of {file}"),
    "count_files": dict(
        ask="how many python files are in this repo|how many .py files are there|how many .py "
            "files does this project have|how many python files does the repo have|how many .py "
            "files are in here|what's the number of python files|how many python modules are there",
        do="count the python files in this repo|count the .py files|tell me how many python files "
           "there are|count the python modules|find out how many .py files there are|give me the "
           "number of python files",
        say="number of python files?|python file count?|how many .py files?|count of python files?"),
    "git_last_files": dict(
        ask="which files did the last commit touch|what files were changed in the last "
            "commit|which files were added in the last commit|what did the last commit touch|which "
            "files changed in the latest commit|what files did the last commit change|which files "
            "were in the latest commit|what did the most recent commit modify",
        do="list the files the last commit touched|show the files in the last commit|show me what "
           "files the latest commit touched|list the files changed in the last commit|tell me "
           "which files the last commit changed|show the files of the most recent commit",
        say="files in the last commit?|last commit - which files?|which files did the last commit "
            "change?|files changed in the latest commit?"),
    "change_constant": dict(
        do="set {const} to {value}|set {const} in {file} to {value}|change {const} to "
           "{value}|change {const} in {file} to {value}|update {const} to {value}|make {const} "
           "{value}|set the value of {const} to {value}|change the constant {const} to "
           "{value}|update {const} in {file} to {value}|make {const} equal {value}|modify {const} "
           "so it is {value}",
        say="{const} should be {value}, update it|{const} in {file} should be {value}. change "
            "it|we need {const} = {value}; set it in {file}|please set {const} to {value}|change "
            "{const} to {value} please"),
    "add_docstring": dict(
        do="document {fn}|add a docstring to {fn}|write a docstring for {fn}|document {fn} with a "
           "docstring|write documentation for {fn}|put a docstring on {fn}|add docs to {fn}",
        say="{fn} needs a docstring. add one|{fn} is missing a docstring. add one|{fn} is "
            "undocumented, please document it|please document {fn}"),
    "remove_function": dict(
        do="delete {fn}, nobody uses it|remove {fn}|delete {fn}|remove the unused function "
           "{fn}|delete the dead function {fn}|drop {fn}, it's unused|delete the function {fn}, "
           "it's not used",
        say="{fn} is dead code, remove it|nobody calls {fn} anymore. delete it|{fn} is unused; "
            "delete it|please remove {fn}, it's dead"),
}, openers=("hey, ", "ok so ", "one thing: ", "before i push, ", "i'm reading the code. ",
            "i'm new to this repo. ", "hi! ", "so, ", "hello, ", "question: ",
            "i'm looking at this project. ", "ok, ", "next: "),
   asks=("can you ", "could you ", "can you please ", "could you please ",
         "would it be possible to "), please=("please ", "go ahead and "),
   closers=("", "", "", ".", "!", " please", " thanks", ", thanks", " ty", " for me", ", please",
            " asap"),
   trailers=("no rush.", "it's for a review.", "thanks!", "i'm trying to understand the code.",
             "appreciate it.", "thank you!", "just curious."))

HELDOUT = Grammar(cores={
    "find_definition": dict(
        ask="[where on earth] is {fn} hiding|[which corner of the repo] holds {fn}|[in what file does] "
            "{fn} reside|[whereabouts is] {fn}",
        do="[point me to the spot where] {fn} gets defined|[track down the definition] of {fn}|"
           "[dig up the source] of {fn}",
        say="[i'm hunting for] {fn}, [got a file and line number]?|{fn} - [no clue where it lives]"),
    "find_class": dict(
        ask="[where on earth] is the {cls} class hiding|[which corner of the repo] holds class {cls}|"
            "[in what file does] class {cls} reside",
        do="[point me to the spot where] class {cls} gets defined|[track down the definition] of class "
           "{cls}|[dig up the source] of the {cls} class",
        say="[i'm hunting for] the {cls} class, [got a file and line number]?"),
    "explain": dict(
        ask="[what's the deal with] {fn}|[what's the story behind] {fn} in {file}|[what's the gist of] "
            "{fn}|what is {fn} [actually up to]",
        do="[walk me through what] {fn} is doing|[give me the gist of] {fn} in plain words|"
           "[give me the gist of] {fn} from {file}|[walk me through what] {fn} in {file} is doing",
        say="{fn} [is a mystery to me]; [what's its job]?"),
    "fix_bug": dict(
        do="[track down whatever broke the test suite] and squash it|squash the bug in {fn} "
           "[that trips up] {test}|repair {fn} [so the suite goes back to green]",
        say="[pytest went red on me]; sort out {fn} please|{test} [keeps blowing up]; squash the bug in "
            "{fn}|[the suite is unhappy]; hunt the bug down and squash it"),
    "implement_stub": dict(
        do="[fill in the missing logic of] {fn} [so pytest is happy]|flesh out {fn} "
           "[in line with its docstring]|flesh out the body of {fn} in {file} "
           "[in line with its docstring]",
        say="{fn} [is a placeholder right now], flesh it out|{fn} in {file} [is an empty shell]; flesh it "
            "out"),
    "rename_symbol": dict(
        do="[swap every usage of] {fn} for the new name {new}|swap the name {fn} for {new}, "
           "[across every file, tests and all]",
        say="[i'd prefer the name] {new} over {fn}, [swap it across the codebase]"),
    "add_parameter": dict(
        do="[extend the signature of] {fn} with {param}={default}|extend {fn} [so it also accepts] "
           "{param}, [with a fallback of] {default}",
        say="[let callers of] {fn} pass an extra {param} (defaulting to {default})"),
    "create_test": dict(
        do="[set up a fresh test module] {test} that exercises {fn}|introduce {test} that puts {fn} "
           "[through its paces]",
        say="{fn} [has zero coverage]; introduce a test module {test} [to put it through its paces]"),
    "create_module": dict(
        do="introduce {file} [with a single routine] {fn}; its job is to {doc}",
        say="[i'd like a brand new file] {file} holding {fn}; behaviour: {doc}"),
    "run_tests": dict(
        ask="[is the suite passing at the moment]|[how is the suite holding up]",
        do="[kick off the test suite and give me the verdict]|[give the suite a spin]|[fire up pytest] "
           "[and give me the verdict]",
        say="[is the suite passing at the moment]? go run it"),
    "line_count": dict(
        ask="how tall is {file}, [measured in lines]",
        do="[tell me the length of] {file}, [measured in lines]|[tell me the length of] {file}",
        say="{file} - [how many lines long]?|[tell me the length of] {file} in lines, please"),
    "list_files": dict(
        ask="[what lives under] {pkg}|[what sits inside the] {pkg} package|[what's tucked away in] {pkg}",
        do="[give me an inventory of the modules under] {pkg}|[walk me through the contents of] {pkg}"),
    "git_last": dict(
        ask="[what landed most recently] in the git log|[what's the newest entry in the history]",
        do="[summarize the newest entry in the git log for me]|"
           "[bring me up to speed on the newest commit]"),
    "git_changes": dict(
        ask="[what's lying around uncommitted]|[have i left anything dangling] in the working tree",
        do="[give me a rundown of my pending edits]",
        say="[anything sitting in my working tree that isn't committed yet]?"),
    "git_count": dict(
        ask="[how deep is the git history]|[how many entries does the git log hold]",
        do="[tell me the number of commits in the history so far]"),
    "recover_path": dict(
        ask="[what's the deal with] {fn} over in {wrong}",
        do="[peek into] {wrong} and describe {fn} to me|crack open {wrong} and [give me the gist of] "
           "{fn}"),
    "recover_cmd": dict(
        ask="[how healthy are the] {module} tests",
        do="[kick off just the] {module} tests [and give me the verdict]|[fire up pytest] on just the "
           "{module} tests"),
    "rejects_run": dict(
        ask="[is the suite passing at the moment]",
        do="[kick off the test suite and give me the verdict]|[fire up pytest] [and give me the verdict]"),
    "rejects_edit": dict(
        do="[fill in the missing logic of] {fn} [so pytest is happy]|flesh out {fn} "
           "[in line with its docstring]"),
    "find_callers": dict(
        ask="[who leans on] {fn}|[which spots in the code reach for] {fn}",
        do="[hunt down every caller of] {fn}|[track down every call site of] {fn}"),
    "find_importers": dict(
        ask="[who pulls in] {module}|[which files drag in] {module}",
        do="[hunt down every file that pulls in] {module}"),
    "explain_file": dict(
        ask="[what's the role of] {file} in this project|what job does {file} [do around here]|"
            "[what's the gist of] {file}",
        do="[give me the gist of] {file}|[walk me through what] {file} is doing"),
    "count_files": dict(
        ask="[how big is this codebase in python files]|[what's the tally of python files] in here",
        do="[tally up the python files] in here|[tally up the python files]"),
    "git_last_files": dict(
        ask="[what did the newest commit bring in]|[which paths did the newest commit touch]",
        do="[rattle off the files in the newest commit]"),
    "change_constant": dict(
        do="tweak {const}; [the value it should hold is] {value}|adjust {const} in {file} "
           "[so that it comes out as] {value}",
        say="{const} [is meant to read] {value}; tweak {file} accordingly"),
    "add_docstring": dict(
        do="annotate {fn} [with a proper docstring]|[jot down a docstring for] {fn} and insert it",
        say="{fn} [lacks any explanation]; annotate it [with a proper docstring]"),
    "remove_function": dict(
        do="ditch {fn}, [it's dead weight]|rip out {fn}, [nothing depends on it]",
        say="{fn} [is dead weight]; rip it out"),
}, openers=("heads up, ", "yo, ", "right, ", "while you're in there, ", "fresh clone here. ",
            "got a sec? ", "morning! "),
   asks=("would you ",), please=("kindly ", "pls "),
   closers=("", "", "", ".", "!", " cheers", ", cheers", " if you can"),
   trailers=("cheers in advance.", "no hurry at all.", "much obliged."))
