"""A chat turn with documents, end to end: real files, the real index and embedder, the
real tiny engine; the passages come out as a SourcesEvent and go into the prompt."""

from __future__ import annotations

import pytest

from app.chat.events import Finished, SourcesEvent, TextDelta
from app.chat.parts import ChatMessage, Source
from app.chat.render import to_message
from app.chat.turn import TurnRequest, run_turn
from app.documents.index import DocumentIndex
from app.documents.library import DocumentLibrary
from app.documents.retriever import LibraryRetriever
from app.engine.engine import Engine
from app.engine.types import GenerationSettings, SamplingSettings
from tests.documents.files import write_pdf

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=6)


@pytest.fixture(scope="module")
def engine(gqa_model_dir):
    return Engine.load(gqa_model_dir, provider="cpu", threads=1)


@pytest.fixture
def retriever(tmp_path, embedder):
    folder = tmp_path / "manuals"
    folder.mkdir()
    (folder / "boiler.md").write_text(
        "# Boiler\n\n## Pressure\n\nThe boiler pressure should read between 1 and 1.5 bar "
        "when the heating is cold.\n\n## Noise\n\nA knocking noise means air in the "
        "radiators: bleed them.\n")
    write_pdf(folder / "bike.pdf", [["Bicycle care."],
                                    ["Inflate the tyres to 4 bar for city riding."]])
    (folder / "recipes.txt").write_text("Bake the bread for forty minutes at 220 degrees.")
    index = DocumentIndex(tmp_path / "docs.sqlite3", embedder_id=embedder.id,
                          dims=embedder.dims)
    library = DocumentLibrary(index, embedder)
    assert len(library.add([folder], "manuals").indexed) == 3
    yield LibraryRetriever(library, ["manuals"], top=2)
    index.close()


def test_the_retriever_returns_sources_with_file_location_and_passage(retriever):
    sources = retriever.search("what pressure should the boiler show")
    assert all(isinstance(s, Source) for s in sources) and len(sources) == 2
    assert (sources[0].document, sources[0].location) == ("boiler.md", "Boiler › Pressure")
    assert "1 and 1.5 bar" in sources[0].text and sources[0].path.endswith("boiler.md")
    tyres = retriever.search("how hard to pump bike tyres")[0]
    assert (tyres.document, tyres.location) == ("bike.pdf", "page 2")


def test_a_turn_over_documents_yields_the_sources_and_puts_them_in_the_prompt(
        engine, retriever):
    question = ChatMessage.of("user", "What pressure should the boiler show?")
    events = list(run_turn(engine, TurnRequest((question,), GREEDY), retriever=retriever))
    assert isinstance(events[0], SourcesEvent)
    sources = events[0].sources
    assert sources[0].document == "boiler.md" and "1.5 bar" in sources[0].text
    done = events[-1]
    assert isinstance(done, Finished)
    assert done.turn[0] == question.with_parts(*sources)  # stored with the turn
    rendered = to_message(done.turn[0])
    assert "[Source 1: boiler.md, Boiler › Pressure]" in rendered.content
    assert "between 1 and 1.5 bar" in rendered.content
    assert rendered.content.endswith("What pressure should the boiler show?")
    assert done.stats[0].prompt_tokens == len(engine.encode_chat([rendered]))
    reply = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert reply == "".join(c.text for c in engine.chat([rendered], GREEDY))


def test_a_follow_up_reuses_the_kv_prefix_through_the_first_turns_passages(engine, retriever):
    """The passages stay on the message they answered, so turn 2's prompt starts with turn
    1's byte for byte and the engine reuses all of it, passages included; only the new
    question and its own passages are prefilled."""
    caches = engine.conversation_caches()
    first = ChatMessage.of("user", "What pressure should the boiler show?")
    one = list(run_turn(engine, TurnRequest((first,), GREEDY, "c", caches),
                        retriever=retriever))[-1]
    assert isinstance(one, Finished)
    asked = one.turn[0]
    passage_tokens = len(engine.encode_chat([to_message(asked)])) - len(
        engine.encode_chat([to_message(first)]))
    assert passage_tokens > 20  # the two passages are a real part of turn 1's prompt
    follow_up = (*one.turn, ChatMessage.of("user", "And what does a knocking noise mean?"))
    two = list(run_turn(engine, TurnRequest(follow_up, GREEDY, "c", caches),
                        retriever=retriever))[-1]
    turn_one, turn_two = one.stats[-1], two.stats[-1]
    assert turn_two.reused_tokens >= turn_one.prompt_tokens > passage_tokens
    assert turn_two.reused_tokens + turn_two.prefilled_tokens == turn_two.prompt_tokens
    # had the history dropped turn 1's passages, the shared prefix would end before them
    bare = (first, *one.turn[1:], follow_up[-1])
    three = list(run_turn(engine, TurnRequest(bare, GREEDY, "c", caches),
                          retriever=retriever))[-1].stats[-1]
    assert three.reused_tokens < turn_one.prompt_tokens - passage_tokens
