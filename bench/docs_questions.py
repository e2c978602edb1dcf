"""The labelled sets of bench_docs.py: (question, a phrase of the passage that answers it, or a
tuple of phrases where the documents answer it in more than one passage).

``README_SET`` is the first set, over README.md and docs/ARCHITECTURE.md (its questions often
share words with the passage). ``PARAPHRASES`` is over the docstrings of Python's standard
library (real text, written by others): each question says in other words what its passage
says, so BM25 cannot win by copying keywords. Its even-numbered questions are the tuning
split (RRF constant, weights, chunk size were chosen on them); the odd-numbered ones are held
out and only reported. A hit is a phrase (whitespace folded) inside one of the top five passages.

Why hybrid does not beat BM25 on the README set. With the fusion alone (800-character
chunks, the heading before the embedded text; BM25 0.85, vectors 0.70, hybrid 0.80 with
``FUSION``; earlier 0.90 / 0.75 / 0.80 over an older README) hybrid lost an answer BM25
ranks 1st and the vectors 42nd ("How large may a request body…"): the README server
section's neighbours rank high in both lists and fill the top five, outscoring a chunk only
one list likes (rank fusion rewarding agreement, not overlap). Fusion variants tried, none
beating BM25 there: RRF k 1-60 x BM25 weight 0.5-1.5 x 20/50/100 candidates, and min-max or
3-sigma normalised score sums (alpha 0.3-0.7); the best tie it with k = 1 or BM25 weighted
up, which the tuning split ranks below ``FUSION``.

Then what goes into the two lists, each variant chosen at ``FUSION`` on the tuning split by
recall@5, ties broken by MRR@10 there (recall@5 hybrid, README / tuning / held-out): a
contextual header (the file's title and heading path before the text the embedder reads)
0.85 / 0.81 / 0.70, with BM25 0.85 on the README set; long paragraphs cut at their list
items as well 0.80 / 0.86 / 0.70 (BM25 0.80); then the chunk size with both: 700, 800, 850
and 900 characters all 0.86 on the tuning split (MRR@10 0.520, 0.581, 0.564, 0.587), 1000
0.81; in a draft of the list cut, 600 gave 0.76 and overlap 100 / 200 no gain. No change in
tuning recall, or a loss: the file title in BM25's heading column (column weight 1 or 3),
and diversifying the fused top five (at most 1-3 chunks per section or per run of
neighbours, or MMR at lambda 0.6-0.9 over the chunk vectors). Landed: 900 characters, list
items, the header (app/documents/chunking.py). The README set gains in both lists but
hybrid stays below BM25 (``bench_docs.py --recall-only``: BM25 0.95, vectors 0.75, hybrid
0.85): it loses "How large may a request body…" (BM25 1st, vectors 25th: five chunks of the
server section, which both lists like, fill the top five) and "Which sampling defaults…"
(BM25 6th, vectors 17th). What the README set likes the tuning split does not: 500-character
chunks with the header (no list cut) gave hybrid 0.95 against BM25 0.90 there, but 0.81 on
tuning and 0.65 held out.

``HEADED`` is a second, independent paraphrase set with headings, built to tune what the
paraphrase set cannot (its docstrings have no headings, so no section's block of chunks
ever crowds a top five there): 30 questions in other words than their passages over the
Markdown long descriptions (PyPI pages) of 15 distributions the app and its test
requirements install (``HEADED_DISTRIBUTIONS``, read with importlib.metadata; 320 chunks
under 204 headings). Even-numbered questions tune, odd ones are held out. A question whose
phrase the installed description lacks (another version reworded it) is skipped and
counted, never scored as a miss.

Section diversity, chosen on the headed tuning split (bench/tune_fusion.py, one index of
all three sets; recall@5 README / tuning / held-out / headed tuning / headed held-out, at
``FUSION``): plain fusion 0.85 / 0.86 / 0.75 / 0.93 / 0.80 (BM25 0.95 / 0.57 / 0.45 /
0.80 / 0.53, vectors 0.85 / 0.76 / 0.70 / 0.87 / 0.73). At most 1 chunk per section
(file, page, heading; a chunk under no heading is a section of its own, else a cap per
section is a cap per plain-text file: the paraphrase tuning split fell to 0.48) 0.87 on
headed tuning; at most 2 or 3 0.93, identical to plain on every split; each list ranking
sections instead of chunks (``section_ranks``) with a cap of 1, 2 or 3: README 0.95 (the
crowded answer comes back) but headed tuning 0.87 / 0.80 / 0.87; sections fused as
sections (``by_section``), caps 1-3: 0.87 there (README 0.80-0.90); at k 10 none did
better. The cost, seen in an index of the headed set alone: an answer in the second chunk
of a section whose first chunk ranks above it ("a quicker variant of the Markdown
parser…") is dropped by a cap of one, while a cap brings back one crowded out by second
chunks of one file's sections ("How many times does the API client…"). No variant beats
plain fusion on the headed tuning split, so none is on: ``FUSION`` keeps them off, and
hybrid stays below BM25 on the README set (0.85 against 0.95), above both lists on the
paraphrase and headed sets.

Then maximal marginal relevance over the fused list with each list's first chunk kept
(``Fusion.mmr``, ``keep_firsts``), chosen on both tuning splits together (bench/tune_fusion.py;
recall@5 tuning / headed tuning, MRR@10 over both): with the firsts kept, MMR at 0.6-0.9 ties
plain fusion on recall (0.86 / 0.93), MRR@10 0.626 / 0.643 / 0.637 / 0.637 / 0.629 / 0.627 at
0.6 / 0.65 / 0.7 / 0.75 / 0.8 / 0.9 against 0.620 without MMR; 0.7, the middle of the lead,
is in ``FUSION``. The firsts kept alone leave tuning unchanged. What it does on the README
set: "Where are my conversations saved…" (vectors 4th, no BM25 match) comes in by MMR,
"How large may a request body…" (BM25 1st) as BM25's kept first; README hybrid 0.95
against BM25 0.90 over the docs before that note was written, 0.95 against 0.95 after (the
note's text moved BM25 onto "How do I make a Windows setup program?"). Still missed:
"Which sampling defaults…" (BM25 5th, vectors 20th), in the chunk after one hybrid ranks
first. Tried and not kept, on the same index: the fused list's n-th chunk of a section
weighted 0.9-0.3^(n-1) (README 0.90 at best), BM25's heading column weighted 0-2 (no gain),
and neighbouring chunks of a section merged into one passage whenever both rank (helps
the vectors more than hybrid: vectors 0.85 held out, 1.00 headed tuning).

Why "Which sampling defaults…" is missed, and ``Fusion.follow``. Its label is right (the
README's GGUF item says "temperature 0.8, top-k 40"). That item is longer than a chunk, so
it is cut at its sentences: its subject ("Imports GGUF files…") ends the chunk the vectors
rank 1st and hybrid 1st; the defaults open the next one (BM25 5th, vectors 18th, fused 6th,
0.113 against the 5th's 0.117). Measured on one index of all sets (recall@5 README /
tuning / held-out / headed tuning / headed held-out, MRR@10 of the tuning halves): MMR
off 0.95 / 0.86 / 0.75 / 0.93 / 0.80; MMR not counting a chunk's neighbours in its
section as alike 0.95 there too (so MMR is not what pushes it out); k 2 / 10 / 20 / 60 and
BM25 weight 0.5 / 0.85 / 1.0 no better on tuning and README 0.90-0.95. A chunk both lists
rank scoring a share of the fused score of the chunk before it in its section
(``follow``): 0.1 0.95 / 0.86 / 0.75 / 0.93 / 0.80 (MRR 0.603 / 0.712), 0.15 1.00 / 0.86
/ 0.75 / 0.93 / 0.80 (0.599 / 0.712), 0.2 1.00 / 0.86 / 0.80 / 0.93 / 0.80 (0.595 /
0.706), 0.3 1.00 / 0.86 / 0.80 / 0.93 / 0.80 (0.593 / 0.701), 0.35 1.00 / 0.81 / 0.80 /
0.93 / 0.73, 0.5 0.95 / 0.81 / 0.70 / 0.93 / 0.73 (none: 0.95 / 0.86 / 0.75 / 0.93 / 0.80,
MRR 0.611 / 0.712). The same share for every fused chunk (not only those both lists
rank): same recall, lower tuning MRR (0.579 at 0.2). The tuning halves' recall holds for
shares up to 0.3; 0.15, the middle of that band, is in ``FUSION``. Their MRR@10 falls a
little with any share (the tie-break that chose MMR would keep it off): the README set's
gain is not one the tuning halves show, since their answers rarely cross a chunk's end.

README.md and docs/ARCHITECTURE.md are the set's documents: a note there that quotes these
questions becomes a passage BM25 ranks for them (one did: BM25 fell to 0.85).
"""

from __future__ import annotations

from pathlib import Path

# The README set's documents: README.md and docs/ARCHITECTURE.md as they were when its labels
# were last checked (commit 4426cab), frozen here. Read from the live files, every edit of the
# project's own docs moved the set's figures (a note quoting a label's words, a new section
# beside an answer), so that no two sessions measured the same set.
README_SET_DOCS = Path(__file__).resolve().parent / "corpus" / "readme_set"

README_SET = [
    ("How can I stop the app from making any network connections?",
     "blocks every outbound connection"),
    ("Which sampling defaults do imported GGUF files start with?", "temperature 0.8, top-k 40"),
    ("Where are my conversations saved on disk?", "history.sqlite3"),
    ("How do I move all of Hearth's data to another folder?", "to move all of it"),
    ("What happens when too many requests are waiting for the server?", "429 with"),
    ("How large may a request body to the local API be?", "limited to 4 MiB"),
    ("What is the shortcut for a new conversation?", "Ctrl+N new chat"),
    ("How do I make a Windows setup program?", "Hearth-Setup-"),
    ("Which X11 packages must the Linux build machine have?", "libxcb-icccm4"),
    ("Do different users of the server share their cached prompts?", "never another key's"),
    ("Can I chat with a model served by Ollama on another computer?", "Add a remote engine"),
    ("How long may a client take to send the request headers?", "within 10 s"),
    ("In which formats can a chat be exported?", "Markdown, or JSON with every branch"),
    ("Is a reasoning model's thinking shown separately from its answer?",
     "thinking is kept apart"),
    ("What makes replies that rework pasted code come out faster?", "prompt lookup"),
    # two answers: README's feature line and ARCHITECTURE's "Who decides what" rows
    ("How does Hearth decide between DirectML, CUDA and the CPU?",
     ("Picks the execution", "the provider this machine uses")),
    ("Does regenerating a greedy reply give a different answer than a fresh run?",
     "never depends on what the prompt cache"),
    ("Which web pages are allowed to call the API from a browser?", "--cors-origin"),
    # two answers: README's status bar line and ARCHITECTURE's speculation notes
    ("Where can I see how many speculative guesses were accepted?",
     ("how many guesses were right", "in the status bar and the reply's info")),
    ("Can downloads be paused and resumed after a restart?", "downloads resume after a restart"),
]

#: the stdlib modules whose docstrings make the paraphrase set's documents
PARAPHRASE_MODULES = [
    "collections", "contextlib", "csv", "datetime", "difflib", "functools", "glob", "gzip",
    "hashlib", "heapq", "itertools", "json", "logging", "math", "os", "queue", "random",
    "shutil", "socket", "sqlite3", "string", "subprocess", "tarfile", "threading"]

PARAPHRASES = [
    ("How can I combine several already-ordered streams into one ordered sequence without "
     "loading everything at once?", "does not pull the data into memory all at once"),
    ("How do I find out how often a memoized function answered from its store?",
     "View the cache statistics"),
    ("How do I locate where an executable command lives on the search path?",
     "conforms to the given mode on the PATH"),
    ("How can I tell how full a drive is?", "amount of total, used and free space"),
    ("Suggest the right spelling for a mistyped word out of a list of candidates",
     'get_close_matches("appel"'),
    ("How do I ignore one kind of error, say when deleting a file that may already be gone?",
     "Execution still resumes here"),
    ("How can I manage an unknown number of context managers together?",
     "dynamic management of a stack of exit callbacks"),
    ("Why doesn't a star wildcard pick up dotfiles?",
     "filenames starting with a dot are special cases"),
    ("Draw several distinct items at random, leaving the original list untouched",
     "unique random elements from a population"),
    ("How do I make the random number generator reproducible by fixing its starting point?",
     "Initialize internal state from a seed"),
    ("Which mode string reads an archive compressed with bzip2?", "'r:bz2'"),
    ("How do I grab what a child program prints?", "capture_output=True"),
    ("What happens when a launched program takes too long?", "TimeoutExpired"),
    ("Pair up sequences of unequal length, padding the short ones",
     "the fillvalue is substituted"),
    ("Take only part of an iterator, the way slicing works on lists",
     "Works like a slice() on a list"),
    ("Title-case every word of a sentence", "capitalize each word"),
    ("How do I keep accented letters unescaped when writing JSON?",
     "can contain non-ASCII characters"),
    ("Turn decoded JSON objects into instances of my own classes",
     "JSON-RPC class hinting"),
    ("Fold a sequence into a single value by applying a two-argument function repeatedly",
     "((((1+2)+3)+4)+5)"),
    ("Delete a folder together with everything inside it", "Recursively delete a directory tree"),
    ("When duplicating a folder, are symbolic links followed or kept as links?",
     "symbolic links in the destination tree"),
    ("Which published algorithm does the sequence comparison build on?",
     "gestalt pattern matching"),
    ("What do I use to tally how many times each item occurs?",
     "Dict subclass for counting hashable items"),
    ("Which container is fast for adding and removing at both ends?",
     "optimized for data accesses near its endpoints"),
    ("How do I make a lightweight record type whose fields can be read by name?",
     "new subclass of tuple with named fields"),
    ("A dictionary that fills in a value automatically for missing keys",
     "called without arguments to produce"),
    ("What does a zero or negative capacity mean for a FIFO?", "the queue size is infinite"),
    ("How can one thread wait until another one signals it?",
     "The wait() method blocks until the flag"),
    ("Run a function after a delay, and call it off before it fires",
     "stop the timer's action if it's still waiting"),
    ("Limit how many threads may use a resource at once with a counter",
     "number of release() calls minus"),
    ("Compare two floats for approximate equality", "maximum difference for being considered"),
    ("How far is a point from the origin?", "Euclidean distance from the origin"),
    ("Create a nested folder path, including the missing parents",
     "create a leaf directory and all intermediate ones"),
    ("How do I visit every folder below a starting point?", "Directory tree generator"),
    ("Which digest algorithms have their own quick constructors?",
     "Named constructor functions are also available"),
    ("What compression level is used by default for .gz files?",
     "the default compresslevel is 9"),
    ("Guess the delimiter of an unknown spreadsheet text file", '"Sniffs" the format'),
    ("Why does my one-shot logging setup do nothing when handlers already exist?",
     "does nothing if the root logger already has handlers"),
    ("Open a TCP client link to a host and port with a time limit",
     "Connect to *address* and return the socket object"),
    ("How can a database live only in RAM rather than in a file?", '":memory:"'),
    ("How do I represent the span between two moments?",
     "Difference between two datetime values"),
]

TUNE = PARAPHRASES[0::2]
HELD_OUT = PARAPHRASES[1::2]

#: the distributions whose long descriptions (their PyPI pages, installed with the app and
#: its test requirements) make the headed set's documents: Markdown with real headings
HEADED_DISTRIBUTIONS = [
    "gguf", "huggingface_hub", "llguidance", "markdown-it-py", "mcp", "mcp-server-git",
    "mcp-server-time", "onnx", "openai", "pypdf", "qtawesome", "ruff", "starlette",
    "tokenizers", "uvicorn"]

HEADED = [
    ("Why can't the older synchronous web server interface cope with sockets held open a "
     "long time?", "allow for long-lived connections"),
    ("Can I use only a few pieces of this web library without adopting all of it?",
     "use any of its components independently"),
    ("How many times does the API client try a failed call again on its own?",
     "automatically retried 2 times by default"),
    ("How long does the API client wait for a slow reply before giving up, unless told "
     "otherwise?", "By default requests time out after 10 minutes"),
    ("How much processor time does enforcing a grammar cost for each generated token?",
     "50μs of CPU time per token"),
    ("How do I make the clock server use a zone other than the one my computer is set to?",
     "override this by adding the argument"),
    ("What does the version-control server answer when asked to record a snapshot with "
     "nothing prepared for it?", "an error if nothing is staged"),
    ("Does one compiled package serve several interpreter versions?",
     "single binary wheel to work across multiple Python versions"),
    ("Does fixing the build date make the released files identical on every machine?",
     "alone does not guarantee byte-for-byte identical artifacts"),
    ("After cleaning up the text, can I still find which part of the original sentence a "
     "piece came from?", "Normalization comes with alignments tracking"),
    ("How quickly can it split a gigabyte of text into pieces?",
     "less than 20 seconds to tokenize a GB of text"),
    ("Is there a window for looking through every symbol to find the one I want?",
     "ships with a browser that displays all the available icons"),
    ("Can symbol fonts other than the bundled ones be added at run time?",
     "allows to load other fonts dynamically"),
    ("Besides pulling out text, what else can the PDF library do with files?",
     "splitting, merging, reading and creating annotations"),
    ("Does the command-line tool act differently when an AI coding assistant runs it?",
     "adapt their output when run by an agent"),
    ("Which checks are switched on when I configure nothing?",
     "By default, Ruff enables rules from the"),
    ("Does the linter skip work on files that have not changed since the last run?",
     "avoid re-analyzing unchanged files"),
    ("How do I put out a new release by hand, without the automated workflow?",
     "publish the package manually for any reason"),
    ("What must a tag be called for a release to be made automatically?",
     "is the semantic version number"),
    ("Does the git server ever ask the client which folders it may use?",
     "this server never asks a client for Roots"),
    ("What happens when the model calls a tool the clock server does not have?",
     "as both protocol versions specify"),
    ("How can I get the identifier of a call that failed, to report it to support?",
     "you must catch the"),
    ("Can these asynchronous web apps run on Amazon's serverless functions?",
     "adapter for using ASGI applications with AWS Lambda"),
    ("Does the development server restart by itself when I edit the code?",
     "enable auto-reloading on code changes"),
    ("Which kinds of output rules can the constrained decoder enforce?",
     "Following grammar formats are supported"),
    ("Can I change or swap out the parser's built-in syntax rules?",
     "you can add new rules and even replace existing ones"),
    ("Is there a quicker variant of the Markdown parser written in a compiled language?",
     "experimental Rust binding"),
    ("Which ways of connecting a client to a server does the protocol SDK handle?",
     "every standard transport"),
    ("What values may the number of retries take?", "must be a non-negative integer"),
    ("How many surrounding lines does a diff show unless I ask for more?",
     "Number of context lines to show (default: 3)"),
]
HEADED_TUNE = HEADED[0::2]
HEADED_HELD_OUT = HEADED[1::2]
