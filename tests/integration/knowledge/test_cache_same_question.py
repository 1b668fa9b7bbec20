"""The answer cache on the real database and model: the same question hits, another does not.

e5 puts "Did James offer John the job?" and "Did John offer James the job?" at 0.998
cosine, so before the same-question guard the swapped question got the first one's answer.
"""

from __future__ import annotations

from onebox.knowledge.cache import AnswerCache, CacheHit, CacheMiss
from onebox.knowledge.cache_verify import CacheVerifier
from onebox.knowledge.service import Knowledge
from onebox.testing import ScriptedModel


async def test_swapped_roles_are_refused_and_a_synonym_rewording_hits(knowledge: Knowledge) -> None:
    cache = knowledge.cache
    await cache.put("Did James offer John the job?", "yes, in May")
    miss = await cache.explain("Did John offer James the job?")
    assert isinstance(miss, CacheMiss)
    assert miss.best_similarity is not None and miss.best_similarity >= cache.min_similarity
    assert miss.refused_by_guard is not None and miss.refused_by_guard.startswith("roles differ")
    hit = await cache.lookup("Did James give John the job?")
    assert hit is None  # another verb is another question
    await cache.put("When does the meeting begin?", "at nine")
    reworded = await cache.lookup("When does the meeting start?")
    assert reworded is not None and reworded.answer == "at nine"


async def test_chinese_title_and_role_changes_are_refused(knowledge: Knowledge) -> None:
    cache = knowledge.cache
    await cache.put("谁是公司的总裁？", "张伟", scope="zh")
    await cache.put("张伟给李娜发了邮件吗？", "发了", scope="zh")
    assert await cache.lookup("谁是公司的副总裁？", scope="zh") is None
    assert await cache.lookup("李娜给张伟发了邮件吗？", scope="zh") is None
    hit = await cache.lookup("请问公司的总裁是谁？", scope="zh")
    assert hit is not None and hit.answer == "张伟"


async def test_a_borderline_hit_is_confirmed_by_a_recorded_model_call(knowledge: Knowledge) -> None:
    model = ScriptedModel(["no", "yes"])
    cache = AnswerCache(knowledge.db, knowledge.embedder,
                        verifier=CacheVerifier(knowledge.db, model, below_similarity=1.01))
    await cache.put("When does the meeting begin?", "at nine", scope="verify")
    refused = await cache.explain("When does the meeting start?", scope="verify")
    assert isinstance(refused, CacheMiss) and "verification" in (refused.refused_by_guard or "")
    confirmed = await cache.explain("When does the meeting start?", scope="verify")
    assert isinstance(confirmed, CacheHit) and confirmed.answer == "at nine"
    assert "When does the meeting begin?" in (model.requests[0].messages[0].content or "")
    rows = await knowledge.db.fetch(
        "SELECT run_id, purpose, prompt_tokens FROM onebox.llm_calls WHERE purpose = 'cache_verify'"
        " ORDER BY id", {})
    assert [(r["run_id"], r["purpose"], r["prompt_tokens"]) for r in rows] == [
        (None, "cache_verify", 10), (None, "cache_verify", 10)]


async def test_a_clear_hit_and_a_guard_refusal_make_no_model_call(knowledge: Knowledge) -> None:
    model = ScriptedModel([])
    cache = AnswerCache(knowledge.db, knowledge.embedder,
                        verifier=CacheVerifier(knowledge.db, model, below_similarity=0.5))
    await cache.put("Did James offer John the job?", "yes", scope="verify2")
    assert await cache.lookup("did james offer john the job", scope="verify2") is not None
    assert await cache.lookup("Did John offer James the job?", scope="verify2") is None
    assert model.requests == []


async def test_the_paraphrase_model_answers_a_reworded_english_question(
        knowledge: Knowledge) -> None:
    """The real cache (e5 candidates, then the guard with all-MiniLM-L6-v2 and the rewording
    model): 'open' a shop is 'start' it (the paraphrase model); 'bake' muffins is 'make'
    them (below the paraphrase model's 0.975, read whole by the rewording model); turned
    off, the refusal names the two words and the paraphrase model's score."""
    cache = knowledge.cache
    await cache.put("When did Maria start her flower shop?", "in 2019", scope="para")
    hit = await cache.lookup("When did Maria open her flower shop?", scope="para")
    assert hit is not None and hit.answer == "in 2019"
    await cache.put("What kind of muffins did Caroline make for the party?", "blueberry",
                    scope="para")
    baked = await cache.lookup("What kind of muffins did Caroline bake for the party?",
                               scope="para")
    assert baked is not None and baked.answer == "blueberry"
    no_rewording = AnswerCache(knowledge.db, knowledge.embedder, rewording_similarity=2)
    miss = await no_rewording.explain("What kind of muffins did Caroline bake for the party?",
                                      scope="para")
    assert isinstance(miss, CacheMiss)
    assert "'make' vs 'bake'" in (miss.refused_by_guard or "")
    assert "(paraphrase model 0.96" in (miss.refused_by_guard or ""), miss.refused_by_guard
    off = AnswerCache(knowledge.db, knowledge.embedder, paraphrase_similarity=1.01,
                      rewording_similarity=2)
    assert await off.lookup("When did Maria open her flower shop?", scope="para") is None


async def test_the_rules_wrong_answers_on_blind_pairs_are_refused(knowledge: Knowledge) -> None:
    """Six different questions the cache answered from each other before the rewording model
    and the role rules (blind authors' training pairs): each is now a miss that says why."""
    cache = knowledge.cache
    for i, (stored, asked, why) in enumerate([
        ("小王家的狗叫什么名字？", "小王家的猫叫什么名字？", "rewording model reads another"),
        ("酒精的沸点是多少度？", "酒精的燃点是多少度？", "rewording model reads another"),
        ("吃什么可以补钙？", "吃什么可以补铁？", "rewording model reads another"),
        ("What foods should I eat to lower cholesterol?",
         "What foods should I avoid to lower cholesterol?", "rewording model reads another"),
        ("How do I send money from the US to India?",
         "How do I send money from India to the US?", "roles differ"),
        ("What did I get Helen for Christmas?", "What did Helen get me for Christmas?",
         "roles differ"),
    ]):
        await cache.put(stored, "the stored answer", scope=f"blind-{i}")
        miss = await cache.explain(asked, scope=f"blind-{i}")
        assert isinstance(miss, CacheMiss), (stored, asked)
        assert why in (miss.refused_by_guard or ""), miss.refused_by_guard


async def test_the_rewordings_issue_27_listed_hit_but_two(knowledge: Knowledge) -> None:
    """The refusals issue 27 listed, on the real cache with both models: six now hit (the
    rewording model reads what WordNet and the paraphrase model left); two are still refused,
    after the model read them, by the strict reading of the rewritten questions."""
    cache = knowledge.cache
    pairs = [
        ("When did Maria start her flower shop?", "When did Maria open her flower shop?"),
        ("Which artists did Melanie work with last year?",
         "Which artists did Melanie collaborate with last year?"),
        ("What hobby did Jon take up after retiring?",
         "What hobby did Jon pick up after retiring?"),
        ("What kind of muffins did Caroline make for the party?",
         "What kind of muffins did Caroline bake for the party?"),
        ("Is Gina married?", "Is Gina a married woman?"),
        ("这种邮票由什么机构发行？", "这种邮票由哪个机构负责发行？"),
    ]
    for i, (stored, asked) in enumerate(pairs):
        await cache.put(stored, f"answer {i}", scope=f"listed-{i}")
        hit = await cache.lookup(asked, scope=f"listed-{i}")
        assert hit is not None and hit.answer == f"answer {i}", (stored, asked)
    for i, (stored, asked) in enumerate([
            ("Where did Joanna meet her best friend?",
             "Where did Joanna get to know her best friend?"),
            ("When did Calvin sign up for the cooking class?",
             "When did Calvin enroll in the cooking class?")]):
        await cache.put(stored, "stored", scope=f"still-{i}")
        miss = await cache.explain(asked, scope=f"still-{i}")
        assert isinstance(miss, CacheMiss) and "(rewording)" in (miss.refused_by_guard or ""), \
            miss
