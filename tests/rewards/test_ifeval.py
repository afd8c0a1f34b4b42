"""IFEval verifier against the official evaluation (lm-eval's copy of Google's
``test_instruction_following_strict/_loose``) on all 541 IFEval prompts, with responses built
to satisfy and to violate each prompt's instructions; plus the offline Punkt wiring."""

import json

import pytest

from coevo_jax.data.offline import IFEVAL_FILE
from coevo_jax.rewards import ifeval

pytest.importorskip("lm_eval", reason="the IFEval registry ships in lm-eval (--no-deps)")


def _prompts():
    """IFEval's 541 prompts, shipped with the package (``coevo_jax/data/ifeval``)."""
    text = IFEVAL_FILE.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


WORDS = (
    "the river runs past old stone walls where people walk in the evening light and talk "
    "about small things that matter to them more than they say out loud"
).split()

LANG_TEXT = {
    "en": "This is a short answer written in plain English for the reader.",
    "es": "Esta es una respuesta corta escrita en español para el lector de hoy.",
    "fr": "Ceci est une réponse courte écrite en français pour le lecteur.",
    "de": "Dies ist eine kurze Antwort auf Deutsch für den Leser von heute.",
    "it": "Questa è una breve risposta scritta in italiano per il lettore.",
    "pt": "Esta é uma resposta curta escrita em português para o leitor.",
    "ru": "Это короткий ответ, написанный на русском языке для читателя.",
    "hi": "यह पाठक के लिए हिंदी में लिखा गया एक छोटा उत्तर है।",
}


def _sentences(n: int, offset: int = 0) -> str:
    out = []
    for i in range(max(n, 0)):
        w = WORDS[(offset + 3 * i) % len(WORDS) :] + WORDS
        out.append(" ".join(w[:6]).capitalize() + ".")
    return " ".join(out)


def craft(row) -> str:
    """A response that tries to satisfy every instruction of ``row`` (some pairs conflict)."""
    ids, kws = (
        row["instruction_id_list"],
        [{k: v for k, v in kw.items() if v} for kw in row["kwargs"]],
    )
    by = dict(zip(ids, kws, strict=True))
    n_sent = 6
    if "length_constraints:number_sentences" in by:
        kw = by["length_constraints:number_sentences"]
        n_sent = (
            kw["num_sentences"] + 1 if kw["relation"] == "at least" else kw["num_sentences"] - 1
        )
    if "length_constraints:number_words" in by:
        kw = by["length_constraints:number_words"]
        words = kw["num_words"] + 10 if kw["relation"] == "at least" else kw["num_words"] // 2
        n_sent = max(n_sent, words // 6 + 1) if kw["relation"] == "at least" else max(1, words // 6)
    n_par = 1
    sep = "\n\n"
    if "length_constraints:number_paragraphs" in by:
        n_par, sep = by["length_constraints:number_paragraphs"]["num_paragraphs"], "\n***\n"
    if "length_constraints:nth_paragraph_first_word" in by:
        n_par = by["length_constraints:nth_paragraph_first_word"]["num_paragraphs"]
    per = max(1, n_sent // max(n_par, 1))
    paragraphs = [_sentences(per, offset=k) for k in range(n_par)]
    if "length_constraints:nth_paragraph_first_word" in by:
        kw = by["length_constraints:nth_paragraph_first_word"]
        k = kw["nth_paragraph"] - 1
        if 0 <= k < len(paragraphs):
            paragraphs[k] = kw["first_word"].capitalize() + " " + paragraphs[k]
    if "language:response_language" in by:
        paragraphs = [LANG_TEXT.get(by["language:response_language"]["language"], LANG_TEXT["en"])]
    body = sep.join(paragraphs)
    extra = []
    if "detectable_format:number_highlighted_sections" in by:
        n = by["detectable_format:number_highlighted_sections"].get("num_highlights", 1)
        extra += [f"*highlighted part {i}*" for i in range(n)]
    if "detectable_content:number_placeholders" in by:
        n = by["detectable_content:number_placeholders"].get("num_placeholders", 1)
        extra += [f"[place {i}]" for i in range(n)]
    if "keywords:existence" in by:
        extra.append(" ".join(by["keywords:existence"]["keywords"]) + ".")
    if "keywords:frequency" in by:
        kw = by["keywords:frequency"]
        n = kw["frequency"] + 1 if kw["relation"] == "at least" else kw["frequency"] - 1
        extra.append(" ".join([kw["keyword"]] * max(n, 0)))
    if "keywords:letter_frequency" in by:
        kw = by["keywords:letter_frequency"]
        n = kw["let_frequency"] + 2 if kw["let_relation"] == "at least" else 0
        extra.append(kw["letter"] * n)
    if "change_case:capital_word_frequency" in by:
        kw = by["change_case:capital_word_frequency"]
        n = kw["capital_frequency"] + 1 if kw["capital_relation"] == "at least" else 0
        extra.append(" ".join(["LOUD"] * n))
    if extra:
        body += " " + " ".join(e for e in extra if e)
    if "detectable_format:number_bullet_lists" in by:
        n = by["detectable_format:number_bullet_lists"]["num_bullets"]
        body += "\n" + "\n".join(f"* point {i}" for i in range(n))
    if "detectable_format:multiple_sections" in by:
        kw = by["detectable_format:multiple_sections"]
        body = (
            "\n".join(
                f"{kw.get('section_spliter', 'Section')} {i + 1}\n{_sentences(1, i)}"
                for i in range(kw.get("num_sections", 1))
            )
            + "\n"
            + body
        )
    if "detectable_format:title" in by:
        body = "<<a good title>>\n" + body
    if "keywords:forbidden_words" in by:
        for w in by["keywords:forbidden_words"]["forbidden_words"]:
            body = " ".join(t for t in body.split(" ") if w.lower() not in t.lower())
    if "combination:repeat_prompt" in by:
        body = by["combination:repeat_prompt"]["prompt_to_repeat"] + "\n" + body
    if "combination:two_responses" in by:
        body = body + "\n******\n" + _sentences(2, 5)
    if "detectable_format:constrained_response" in by:
        body = "My answer is yes."
    if "detectable_content:postscript" in by:
        body += "\n" + by["detectable_content:postscript"]["postscript_marker"] + " see you"
    if "startend:end_checker" in by:
        body += " " + by["startend:end_checker"]["end_phrase"]
    if "punctuation:no_comma" in by:
        body = body.replace(",", "")
    if "change_case:english_lowercase" in by:
        body = body.lower()
    if "change_case:english_capital" in by:
        body = body.upper()
    if "detectable_format:json_format" in by:
        body = "```json\n" + json.dumps({"answer": body}) + "\n```"
    if "startend:quotation" in by:
        body = '"' + body + '"'
    return body


def responses(row):
    good = craft(row)
    return [
        good,
        "Sure! Here is my answer:\n" + good + "\nHope this **helps**.",
        "**" + good + "**",
        good.swapcase() + ", and also this, that.",
        "I cannot help with that, my friend, sorry.",
        "Short.",
        "   ",
    ]


def _official(row, response, loose):
    utils = ifeval.load_official_module("utils")
    inp = utils.InputExample(
        key=row["key"],
        instruction_id_list=row["instruction_id_list"],
        prompt=row["prompt"],
        kwargs=row["kwargs"],
    )
    fn = (
        utils.test_instruction_following_loose if loose else utils.test_instruction_following_strict
    )
    return fn(inp, response).follow_instruction_list


def _deterministic(row) -> bool:
    """Whether the official registry builds this row's instructions without drawing at random
    (it does for invalid arguments, e.g. item 1122's "letter" '#')."""
    reg = ifeval.registry()
    for iid, kw in zip(row["instruction_id_list"], row["kwargs"], strict=True):
        inst = reg.INSTRUCTION_DICT[iid](iid)
        clean = {k: v for k, v in kw.items() if v}
        inst.build_description(**clean)
        args = inst.get_instruction_args() or {}
        # the registry sorts keyword lists; compare them as sets
        if any(
            (sorted(args[k]) if isinstance(v, list) else args[k])
            != (sorted(v) if isinstance(v, list) else v)
            for k, v in clean.items()
            if k in args and k != "letter"
        ):
            return False
        if "letter" in clean and args.get("letter") != clean["letter"].strip().lower():
            return False
    return True


def _check_rows(rows):
    seen = {}
    random_rows = [r["key"] for r in rows if not _deterministic(r)]
    assert len(random_rows) <= 2, random_rows
    for row in rows:
        if row["key"] in random_rows:  # the official verdict is random; ours is reproducible
            args = (craft(row), row["instruction_id_list"], row["kwargs"])
            assert {ifeval.score(*args) for _ in range(5)} == {ifeval.score(*args)}
    rows = [r for r in rows if r["key"] not in random_rows]
    for row in rows:
        for resp in responses(row):
            for loose in (False, True):
                ours = ifeval.follow_list(
                    resp,
                    row["instruction_id_list"],
                    row["kwargs"],
                    loose=loose,
                    prompt=row["prompt"],
                )
                if not resp.strip():
                    ours = [False] * len(
                        ours
                    )  # the official check also requires a non-empty response
                theirs = _official(row, resp, loose)
                assert ours == theirs, (row["key"], loose, resp[:200])
                want_all = float(all(theirs)) if resp.strip() else 0.0
                want_frac = sum(theirs) / len(theirs) if resp.strip() else 0.0
                kw = dict(loose=loose, prompt=row["prompt"])
                args = (resp, row["instruction_id_list"], row["kwargs"])
                assert ifeval.score(*args, strict=True, **kw) == want_all
                assert ifeval.score(*args, **kw) == pytest.approx(want_frac)
                for iid, flag in zip(row["instruction_id_list"], theirs, strict=True):
                    seen.setdefault(iid, set()).add(flag)
    return seen


def test_agreement_on_a_sample():
    rows = _prompts()[::18]
    _check_rows(rows)


@pytest.mark.slow
def test_agreement_on_all_541_prompts():
    rows = _prompts()
    assert len(rows) == 541
    seen = _check_rows(rows)
    assert len(seen) == 25
    # the crafted responses both satisfy and violate every one of the 25 instruction kinds
    assert all(flags == {True, False} for flags in seen.values()), {
        k: v for k, v in seen.items() if v != {True, False}
    }


def test_unknown_id_and_empty_response_score_zero():
    assert ifeval.score("hello world", ["punctuation:no_comma"], [{}]) == 1.0
    assert ifeval.score("hello, world", ["punctuation:no_comma"], [{}]) == 0.0
    assert ifeval.score("hello world", ["no:such_instruction"], [{}]) == 0.0
    assert ifeval.score("", ["punctuation:no_comma"], [{}]) == 0.0
    assert ifeval.score("   \n", ["punctuation:no_comma"], [{}]) == 0.0
    assert ifeval.score("hello", [], []) == 0.0
    two = (["punctuation:no_comma", "change_case:english_capital"], [{}, {}])
    text = "this is a short answer written in plain english for the reader"
    assert ifeval.score(text, *two) == 0.5
    assert ifeval.score(text, *two, strict=True) == 0.0
    assert ifeval.score(text.upper(), *two, strict=True) == 1.0
    assert len(ifeval.instruction_ids()) == 25


def test_loose_variants_order():
    v = ifeval.loose_variants("first\n*mid*\nlast")
    assert v[0] == "first\n*mid*\nlast" and v[1] == "first\nmid\nlast"
    assert v[2:5] == ["*mid*\nlast", "first\n*mid*", "*mid*"]
    assert v[5:] == ["mid\nlast", "first\nmid", "mid"]


def test_punkt_offline_and_sentence_counts_stable():
    import nltk
    import punkt

    root = ifeval.ensure_punkt()
    assert nltk.data.path[0] == root
    util = ifeval.registry().instructions.instructions_util
    rows = _prompts()
    reference = punkt.PunktSentenceTokenizer(punkt.load_model("english"))
    differ = set()
    for row in rows:
        text = row["prompt"]
        n = util.count_sentences(text)
        assert n >= 1
        assert n == util.count_sentences(text)  # deterministic
        if n != len(reference.tokenize(text)):
            differ.add(row["key"])
    # nltk's Punkt code (3.10) with the wired parameters splits like the package's own Punkt
    # (which follows NLTK 3.8.1's algorithm) on all prompts but two, where the algorithms
    # differ, not the parameters: 3069 ends "...starting with P.S.?" (nltk makes the "?" a
    # sentence) and 3456 has a "1." list number that nltk splits after.
    assert differ <= {3069, 3456}, differ
    assert util.count_sentences("Dr. Smith went home. He was tired. It rained.") == 3
    assert nltk.word_tokenize("Hello there, friend.") == ["Hello", "there", ",", "friend", "."]
