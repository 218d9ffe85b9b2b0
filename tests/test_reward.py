"""Answer metrics against hand-checked values."""

import pytest

from asearcher_plugin.rewards.reward import (
    asearcher_f1,
    cjk_tokens,
    cover_exact_match,
    exact_match,
    f1_score,
    format_factor,
    invalid_answer_penalty,
    normalize_answer,
    normalize_text,
    parse_aug,
    parse_gold,
    score_all,
    substring_match,
)
from asearcher_plugin.settings.config import RewardConfig


def test_normalisations():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_text("The  Eiffel-Tower!") == "the eiffel tower"
    assert normalize_text("True") == "true"  # as ASearcher's evaluation F1: True/False mapped only on request


@pytest.mark.parametrize(
    "pred,gold,em,f1,sub,cover",
    [
        ("Luanda", ["Luanda"], 1, 1, 1, 1),
        ("the city of Luanda", ["Luanda"], 0, 0.5, 1, 1),
        ("Frank Borman", ["Borman", "Frank Borman"], 1, 1, 1, 1),
        ("Borman Frank", ["Frank Borman"], 0, 1, 0, 1),
        ("Lisbon", ["Luanda"], 0, 0, 0, 0),
        ("", ["Luanda"], 0, 0, 0, 0),
    ],
)
def test_metrics(pred, gold, em, f1, sub, cover):
    assert exact_match(pred, gold) == em
    assert f1_score(pred, gold) == pytest.approx(f1)
    assert substring_match(pred, gold) == sub
    assert cover_exact_match(pred, gold) == cover


def test_asearcher_f1_uses_token_sets():
    # Repeated tokens count once in ASearcher's F1 but twice in SQuAD's.
    assert asearcher_f1("paris paris", "paris") == 1.0
    assert f1_score("paris paris", "paris") == pytest.approx(2 / 3)


def test_gold_parsing_and_format():
    assert parse_gold('["a", "b"]') == ["a", "b"]
    assert parse_gold("Luanda") == ["Luanda"]
    assert parse_gold({"golden_answers": ["x"]}) == ["x"]
    assert format_factor(0, True) == 1.0 and format_factor(1, True) == 0.0 and format_factor(0, False) == 0.0
    assert score_all(None, ["x"])["f1"] == 0.0


# ASearcher's training reward options (AReaL/ASearcher/utils/rewards.py and search_tool.py), by hand.


@pytest.mark.parametrize(
    "pred,gold,expected",
    [
        # {北,京,市} vs {北,京}: P = 2/3, R = 1, F1 = 2 * (2/3) / (2/3 + 1) = 0.8
        ("北京市", "北京", 0.8),
        # gold: runs {2008} + chars {年,北,京,奥,运,会} = 7 tokens; prediction: runs {2008, 8} + chars
        # {北,京,奥,运,会,于,年,月,举,行} = 12 tokens; common 7: P = 7/12, R = 1, F1 = (14/12) / (19/12) = 14/19
        ("北京奥运会于2008年8月举行", "2008年北京奥运会", 14 / 19),
        # "，" and "。" are dropped, order does not matter: {北,京,中,国} both sides, F1 = 1
        ("中国北京。", "北京，中国", 1.0),
        # a Chinese gold splits Latin words into letters too: gold {北,京,b,e,i,j,n,g} (8), prediction
        # {b,e,i,j,n,g} (6): P = 1, R = 6/8, F1 = 1.5 / 1.75 = 6/7
        ("Beijing", "北京 Beijing", 6 / 7),
        # only the gold is tested for Chinese: an English gold keeps word tokens
        ("北京", "Beijing", 0.0),
        # U+3400 (Extension A) is matched: {㐀,㐁} vs {㐀}: P = 1/2, R = 1, F1 = 2/3
        ("㐀㐁", "㐀", 2 / 3),
        # Extension B (U+20000) is not (ASearcher's surrogate-pair test never fires): one word each, no match
        ("\U00020000\U00020001", "\U00020000", 0.0),
        # kana is not Chinese to it either
        ("ひらがなです", "ひらがな", 0.0),
    ],
)
def test_asearcher_f1_over_chinese_characters(pred, gold, expected):
    assert asearcher_f1(pred, gold, cjk=True) == pytest.approx(expected)


def test_chinese_f1_is_off_by_default_and_bag_based_for_squad_f1():
    assert asearcher_f1("北京市", "北京") == 0.0 and f1_score("北京市", "北京") == 0.0
    assert f1_score("北京市", ["上海", "北京"], cjk=True) == pytest.approx(0.8)
    # SQuAD's F1 keeps counting repeats: [哈,哈,哈] vs [哈]: P = 1/3, R = 1, F1 = (2/3) / (4/3) = 0.5; sets give 1
    assert f1_score("哈哈哈", "哈", cjk=True) == pytest.approx(0.5)
    assert asearcher_f1("哈哈哈", "哈", cjk=True) == 1.0
    assert cjk_tokens("第2008届x²") == ["2008", "²", "第", "届", "x", "²"]


def test_aug_answer_blend():
    opts = RewardConfig(aug_answer_weight=0.3)
    label = {"answer": ["Luanda"], "aug_answer": ["Loanda", "Sao Paulo de Loanda"]}
    golds, aug = parse_gold(label), parse_aug(label)
    assert golds == ["Luanda"] and aug == ["Loanda", "Sao Paulo de Loanda"]
    # 0.7 * f1(answer) + 0.3 * max(f1(aug), f1(answer)) = 0.7 * 0 + 0.3 * 1 = 0.3
    assert score_all("Loanda", golds, opts, aug)["f1"] == pytest.approx(0.3)
    # "Loanda city" vs aug "Loanda": P = 1/2, R = 1, F1 = 2/3; 0.3 * 2/3 = 0.2
    assert score_all("Loanda city", golds, opts, aug)["asearcher_f1"] == pytest.approx(0.2)
    # the aliases never lower the answer's own score: 0.7 * 1 + 0.3 * max(0, 1) = 1
    assert score_all("Luanda", golds, opts, aug)["em"] == 1.0
    # off by default (weight 0) and a no-op without aliases
    assert score_all("Loanda", golds, RewardConfig(), aug)["f1"] == 0.0
    assert score_all("Loanda", golds, opts, [])["f1"] == 0.0
    assert parse_aug('{"answer": "x", "aug_answer": "y"}') == ["y"] and parse_gold('{"answer": "x"}') == ["x"]
    assert parse_aug(["x"]) == [] and parse_aug({"answer": "x", "aug_answer": None}) == []


def test_invalid_answer_penalty():
    opts = RewardConfig(invalid_answer_penalty=-0.5)
    assert invalid_answer_penalty(0.0, "the question is invalid.", opts) == -0.5
    assert invalid_answer_penalty(1.0, "not a valid date", opts) == -0.5  # the words are matched anywhere
    assert invalid_answer_penalty(1.0, "Question Mark", opts) == 1.0  # case-sensitive, as ASearcher's
    assert invalid_answer_penalty(0.4, None, opts) == 0.4  # no answer, no penalty
    assert invalid_answer_penalty(0.0, "the question is invalid.", RewardConfig()) == 0.0  # off by default


def test_reward_options_reach_the_environment_reward():
    import asyncio

    from asearcher_plugin.env import AgentInstance
    from asearcher_plugin.settings.config import AgentConfig

    def reward(answer: str, label, **options) -> float:
        config = AgentConfig(agent_type="search-r1", reward=RewardConfig(**options))
        result = asyncio.run(
            AgentInstance(config, None).step({"action_text": f"<answer>{answer}</answer>", "label": label})
        )
        return result["rewards"].item()

    assert reward("北京市", ["北京"]) == 0.0
    assert reward("北京市", ["北京"], cjk_char_f1=True) == pytest.approx(0.8)
    # ASearcher's training data: the label object carries answer and aug_answer (here as the JSON text of one)
    label = '{"answer": ["Luanda"], "aug_answer": ["Loanda"]}'
    assert reward("Loanda", label) == 0.0
    assert reward("Loanda", label, aug_answer_weight=0.3) == pytest.approx(0.3)
    # the penalty replaces the score after the format factor, as ASearcher's does
    assert reward("the question is invalid", ["Luanda"], invalid_answer_penalty=-0.5) == -0.5
    assert reward("the question is invalid", ["Luanda"]) == 0.0


def test_null_label_has_no_gold_answer():
    # a null label once became the gold answer "None", so answering "None" scored 1.0
    assert parse_gold(None) == []
    assert parse_gold(["Luanda", None]) == ["Luanda"]
    assert score_all("None", parse_gold(None))["em"] == 0.0
    assert score_all("None", parse_gold(None))["f1"] == 0.0


def test_valid_instruction_mix_as_asearcher_trains():
    """`valid_inst_ratio` 0.3 with ASearcher's template: about 30% of questions are asked for the most likely answer
    (its VALID sentence in place of the invalid-question one) and only their invalid answers lose 0.5; every sample
    of a question agrees."""
    import asyncio

    from asearcher_plugin.env import AgentInstance
    from asearcher_plugin.settings.config import AgentConfig

    invalid_sentence = "the Assistant replies with '<answer> the question is invalid. </answer>'."
    config = AgentConfig(
        agent_type="asearcher",
        prompt_template="asearcher-search-only",
        reward={"metric": "asearcher_f1", "invalid_answer_penalty": -0.5, "valid_inst_ratio": 0.3},
    )

    async def episode(question: str):
        agent = AgentInstance(config, None)
        prompt = (await agent.reset({"observation": question}))["observation"]
        result = await agent.turn("<think>x</think>\n<answer> the question is invalid. </answer>", label=["Luanda"])
        return prompt, result.reward

    questions = [f"What is the capital of country number {i}?" for i in range(400)]
    runs = [asyncio.run(episode(q)) for q in questions]
    told_valid = [invalid_sentence not in prompt for prompt, _ in runs]
    assert 0.25 < sum(told_valid) / len(runs) < 0.35  # 0.3 of the questions, drawn per question
    for (prompt, reward), valid in zip(runs, told_valid):
        if valid:  # ASearcher's VALID sentence in its place, and the invalid answer penalised
            assert "You should try to find the most likely answer. " in prompt and reward == -0.5
        else:  # the template as ASearcher ships it, the invalid answer scored as any wrong answer
            assert prompt.startswith("A conversation between User and Assistant.") and reward == 0.0
    assert [asyncio.run(episode(q))[1] for q in questions[:20]] == [r for _, r in runs[:20]]  # the group agrees
    # a template without the sentence to replace is refused at load, naming the way out
    with pytest.raises(ValueError, match="asearcher-search-only"):
        AgentConfig(agent_type="asearcher", reward={"valid_inst_ratio": 0.3})


def test_bool_mapping_reads_true_and_false_as_yes_and_no():
    opts = RewardConfig(bool_mapping=True)
    assert score_all("True", ["yes"], opts)["asearcher_f1"] == 1.0
    assert score_all("yes", ["True"], opts)["f1"] == 1.0
    assert score_all("False", ["no"], opts)["em"] == 1.0
    assert score_all("true", ["yes"], opts)["f1"] == 0.0  # exactly "True", as ASearcher's
    assert score_all("True", ["yes"], RewardConfig())["f1"] == 0.0  # off by default
