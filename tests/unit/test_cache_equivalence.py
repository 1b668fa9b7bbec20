"""Answer cache v3: a question asked in other words is the same question; what must never
change (tense, signs, antonyms, modals, quantifiers, names) still refuses (pure: WordNet,
jieba and Cilin, no embedding model; Chinese word similarity is tested with the model in
tests/integration/knowledge/test_cache_v3.py)."""

from __future__ import annotations

import pytest

from onebox.knowledge.equivalence import canonical, zh_opposed
from onebox.knowledge.guard import different_question

# Rewordings an outside test of the v2 cache refused ("terms differ"), issue 27.
REFUSED_BEFORE = [
    ("Is freeing the hostages the main goal of the mission?",
     "Is liberating the hostages the main goal of the mission?"),
    ("Did Tom take the kids to the park on Sunday?", "Did Tom bring the kids to the park on Sunday?"),
    ("How many times has Nate been to Italy?", "How often has Nate been to Italy?"),
    ("How many dogs does Audrey have?", "How many dogs has Audrey got?"),
    ("Does Evan not like jazz?", "Does Evan dislike jazz?"),
    ("这座寺庙建于什么朝代？", "这座寺庙建于哪个朝代？"),
    ("该条约于何年签订？", "该条约于哪一年签订？"),
    ("该乐队成立于什么地方？", "该乐队成立于何处？"),
    ("这部电影的票房为多少？", "这部电影的票房是什么？"),
    ("长江是一条什么样的河流？", "长江是怎样的一条河流？"),
    ("苹果公司的总部在哪里？", "苹果公司总部在哪里？"),
    ("这个博物馆有没有停车场？", "这个博物馆有停车场吗？"),
    ("他是不是这家公司的创始人？", "他是这家公司的创始人吗？"),
    ("这座大桥是否已经通车？", "这座大桥已经通车了吗？"),
    ("一千克黄金值多少钱？", "1千克黄金值多少钱？"),
    ("西湖位于哪个省？", "西湖在哪个省？"),  # Cilin: 位于 = 在
    # structure: an agent noun is its verb, a measure noun its adjective, "is there" = "have"
    ("Who painted the Mona Lisa?", "Who was the painter of the Mona Lisa?"),
    ("How tall is Mount Kilimanjaro?", "What is the height of Mount Kilimanjaro?"),
    ("Does the hotel have a gym?", "Is there a gym at the hotel?"),
    ("Did Paul ever visit Norway?", "Has Paul ever been to Norway?"),
    ("Can you recommend a good book?", "Could you recommend a good book?"),
    ("飞机几点起飞？", "飞机什么时候起飞？"),
    ("张伟喜欢什么运动？", "张伟爱好什么运动？"),  # Cilin: 喜欢 = 爱好
    # question shapes: a cause, a population, a distance either way round, a job, an
    # author, a way to do something
    ("Why did the bridge collapse?", "What caused the bridge to collapse?"),
    ("Why is the sky blue?", "What makes the sky blue?"),
    ("Why did Ken move to Oslo?", "What was the reason Ken moved to Oslo?"),
    ("How many people live in Oslo?", "What is the population of Oslo?"),
    ("How far is the beach from the hotel?", "What is the distance from the hotel to the beach?"),
    ("What does Sam do for a living?", "What is Sam's job?"),
    ("Who wrote the novel Middlemarch?", "Who is the author of the novel Middlemarch?"),
    ("What is the best way to store fresh basil?", "How should I store fresh basil?"),
    ("How do I boil rice?", "What's the way to boil rice?"),
    ("When did the Berlin Wall fall?", "In what year did the Berlin Wall fall?"),
    ("Where was Mozart born?", "What is Mozart's birthplace?"),
    ("How do I get to the train station?", "What is the way to the train station?"),
    ("东京有多少人口？", "东京的人口是多少？"),
    ("中国有多少个省？", "中国一共有几个省？"),  # 一共 is no number
    ("《红楼梦》的作者是谁？", "谁写了《红楼梦》？"),
    ("火车站怎么走？", "去火车站怎么走？"),
    ("怎样才能提高英语口语？", "如何提高英语口语？"),
    ("月亮离地球有多远？", "月亮和地球之间的距离是多少？"),
    ("小王是做什么工作的？", "小王的职业是什么？"),
    ("这个词是什么意思？", "这个词的意思是什么？"),
    ("上海到杭州要多长时间？", "上海到杭州要多久？"),
    ("博物馆星期天开门吗？", "博物馆周日开门吗？"),
    # "has X got" with a subject of several words; the present with a future time is future
    ("How many legs does a spider have?", "How many legs has a spider got?"),
    ("Is the restaurant open tomorrow?", "Will the restaurant be open tomorrow?"),
    ("Does the train leave next Monday?", "Will the train leave next Monday?"),
    # any A-not-A question is a yes/no one (V不V, A不AB)
    ("北京明天下雨吗？", "北京明天下不下雨？"),
    ("你喜欢吃辣吗？", "你喜不喜欢吃辣？"),
    ("这家店开门吗？", "这家店开不开门？"),
    # a name and the name WordNet gives the same main sense (an acronym, a country's names)
    ("What is the price of the iPhone 15 Pro in the UK?",
     "What is the price of the iPhone 15 Pro in the United Kingdom?"),
    ("Who is the CEO of Spotify?", "Who is the chief executive officer of Spotify?"),
    ("Are flights to the US expensive in May?", "Are flights to America expensive in May?"),
    # a question word said as a phrase: 是什么原因 / 怎么回事 = 为什么, 有什么办法 = 怎么,
    # 要几个小时 = 要多久, 的费用是多少 = 多少钱; 从 (from) adds nothing before a place
    ("手机充不进电是怎么回事？", "为什么手机充不进电？"),
    ("为什么天空是蓝色的？", "天空是蓝色的是什么原因？"),  # 的 before the phrase: no possessor
    # a polite wrapper asks what it wraps; "the process / procedure for" is "how do I"
    ("What is photosynthesis?", "Can you explain what photosynthesis is?"),
    ("What is the capital of Australia?", "Could you tell me what the capital of Australia is?"),
    ("Where does Omar work?", "Could you please tell me where Omar works?"),
    ("How do I delete my Instagram account?",
     "What's the process to delete my Instagram account?"),
    ("How do I get to the train station?", "What is the way to the train station?"),
    ("怎么去除衣服上的油渍？", "有什么办法去除衣服上的油渍？"),
    ("怎样才能去掉水垢？", "用什么方法可以去掉水垢？"),
    ("上海到杭州坐高铁要多长时间？", "上海到杭州坐高铁要几个小时？"),
    ("办签证多少钱？", "办签证的费用是多少？"),
    ("上海到杭州要多久？", "从上海到杭州要多久？"),
]
# Refused by the rules alone: the reason names the two spans (the list). The verb
# and the verb above it in WordNet (open/start, collaborate/work, pick/take) would also
# make offer/give, steal/take, buy/get and walk/go the same: refused on purpose. With the
# rewording model six of them hit (tests/integration/knowledge/test_cache_same_question.py).
STILL_REFUSED = [
    ("When did Maria start her flower shop?", "When did Maria open her flower shop?"),
    ("Which artists did Melanie work with last year?",
     "Which artists did Melanie collaborate with last year?"),
    ("What hobby did Jon take up after retiring?", "What hobby did Jon pick up after retiring?"),
    ("What kind of muffins did Caroline make for the party?",
     "What kind of muffins did Caroline bake for the party?"),
    ("Where did Joanna meet her best friend?", "Where did Joanna get to know her best friend?"),
    ("Is Gina married?", "Is Gina a married woman?"),
    ("When did Calvin sign up for the cooking class?",
     "When did Calvin enroll in the cooking class?"),
    ("这种邮票由什么机构发行？", "这种邮票由哪个机构负责发行？"),
]


@pytest.mark.parametrize(("a", "b"), REFUSED_BEFORE)
def test_a_question_in_other_words_is_the_same_question(a: str, b: str) -> None:
    assert different_question(a, b) is None, different_question(a, b)


@pytest.mark.parametrize(("a", "b"), STILL_REFUSED)
def test_the_rewordings_still_refused_name_the_words_that_differ(a: str, b: str) -> None:
    reason = different_question(a, b)
    assert reason is not None and reason.startswith("terms differ: ")


@pytest.mark.parametrize(("a", "b", "why"), [
    ("Does Sam live in Boston?", "Did Sam live in Boston?", "tense differs"),
    ("Who will win the election?", "Who won the election?", "tense differs"),
    ("Who will win the election?", "Who wins the election?", "tense differs"),
    ("Is the restaurant open today?", "Will the restaurant be open tomorrow?", "tense differs"),
    ("Does the train leave next Monday?", "Will the train leave next Friday?", "tense differs"),
    ("Will Tom come to the party?", "Does Tom come to the party?", "tense differs"),
    ("每天跑步多少公里比较合适？", "每周跑步多少公里比较合适？", "terms differ"),
    ("这家店关门吗？", "这家店开不开门？", "negation differs"),
    ("他来不来？", "他不来吗？", "negation differs"),
    ("Is John married?", "Was John married?", "tense differs"),
    ("Has Anna finished the marathon?", "Will Anna finish the marathon?", "tense differs"),
    ("他去过日本吗？", "他会去日本吗？", "tense differs"),
    ("Does salt water freeze at -5 °C?", "Does salt water freeze at 5 °C?", "numbers differ"),
    ("气温会降到零下5度吗？", "气温会降到5度吗？", "numbers differ"),
    ("气温降到零下十度了吗？", "气温降到十度了吗？", "numbers differ"),
    ("Is John married?", "Was John married?", "tense differs"),
    ("Has Anna finished the race?", "Is Anna finishing the race?", "tense differs"),
    ("Does Evan like jazz?", "Does Evan dislike jazz?", "negation differs"),
    ("What is the largest lake in Africa?", "What is the smallest lake in Africa?", ""),
    ("Did the price of gold rise in May?", "Did the price of gold fall in May?", ""),
    ("张伟喜欢什么运动？", "张伟讨厌什么运动？", ""),
    ("上海的房价上涨了吗？", "上海的房价下跌了吗？", ""),
    ("Can I bring my dog to the office?", "Must I bring my dog to the office?", ""),
    ("我可以在这里停车吗？", "我必须在这里停车吗？", ""),
    ("Did everyone pass the exam?", "Did anyone pass the exam?", ""),
    ("所有学生都通过考试了吗？", "有学生通过考试了吗？", ""),
    ("Where does Nadia work?", "Where does Natalia work?", ""),
    ("王芳在哪家公司工作？", "王丽在哪家公司工作？", ""),
    ("What is the population of Austria?", "What is the area of Austria?", ""),
    ("乙醇的沸点是多少？", "乙醇的熔点是多少？", ""),  # Cilin: related, not the same
    ("谁是公司的总裁？", "谁是公司的副总裁？", ""),
    ("小红的爸爸做什么工作？", "小红的妈妈做什么工作？", ""),
    ("Did Maya help Leo move house?", "Did Leo help Maya move house?", ""),
    ("中国队打败了日本队吗？", "日本队打败了中国队吗？", ""),
    ("开车时能打电话吗？", "开车时别打电话吗？", ""),
    ("What did Tom buy at the market?", "What did Tom sell at the market?", ""),
    ("When did Ella study medicine?", "Where did Ella study medicine?", ""),
    ("张三的老师喜欢李四吗？", "张三喜欢李四的老师吗？", ""),
    ("How did you fix the leak?", "How do you fix the leak?", "tense differs"),
    ("What caused the bridge to collapse?", "What caused the tower to collapse?", ""),
    ("How far is Paris from Rome?", "How far is Paris from Lyon?", ""),
    ("What is the population of Oslo?", "How many people work in Oslo?", ""),
    ("What does Sam do for a living?", "What did Sam do for a living?", "tense differs"),
    ("Where was Mozart born?", "What is Beethoven's birthplace?", ""),
    ("东京有多少人口？", "大阪的人口是多少？", ""),
    ("《红楼梦》的作者是谁？", "谁写了《西游记》？", ""),
    ("博物馆星期天开门吗？", "博物馆星期一开门吗？", ""),
    ("小王是做什么工作的？", "小李的职业是什么？", ""),
    ("北京离上海有多远？", "北京离天津有多远？", ""),
    ("下一班火车几点出发？", "下一班火车几点到达？", ""),  # a false hit of the fifth held-out set
    ("小张是什么时候入职的？", "小张是什么时候离职的？", ""),  # of the seventh: join / leave
    ("天空是蓝色的是什么原因？", "天空什么时候是蓝色的？", "question words differ"),
    ("Could you tell me what the capital of Austria is?", "What is the capital of Australia?",
     ""),
    ("Can you tell me when the museum opens?", "Where is the museum?", ""),
    ("她哪一年入学的？", "她哪一年退学的？", ""),
    # two names share a rare sense only (WordNet: king, queen = "a competitor who holds a
    # preeminent position"), and names that are two places, not two names of one
    ("How old is the Queen of Denmark?", "How old is the King of Denmark?", "terms differ"),
    ("What is the capital of England?", "What is the capital of the UK?", "terms differ"),
    ("Who is the CEO of Spotify?", "Who is the CFO of Spotify?", "terms differ"),
])
def test_what_must_never_change_is_refused(a: str, b: str, why: str) -> None:
    reason = different_question(a, b, lambda x, y: True)  # even a judge that says yes to all
    assert reason is not None, f"{a!r} and {b!r} were read as the same question"
    assert reason.startswith(why), reason


def test_an_agent_noun_is_not_its_verb_as_a_word() -> None:
    from onebox.knowledge.word_sense import synonyms

    assert not synonyms("painter", "paint"), "only the 'who was the painter of' shape reads so"
    assert not synonyms("second", "minute") and synonyms("holiday", "vacation")


@pytest.mark.parametrize(("a", "b"), [
    ("What does Mr Wang teach?", "What does Mr Wang learn?"),
    ("Does Sam sleep after lunch?", "Does Sam rest after lunch?"),
    ("Does Anna drive to work?", "Does Anna ride to work?"),
])
def test_a_sense_a_word_is_rarely_used_in_does_not_make_it_a_synonym(a: str, b: str) -> None:
    """WordNet lists "learn" in the sense "teach" (2 of its 154 tagged uses): that sense
    alone never pairs the words."""
    reason = different_question(a, b)
    assert reason is not None and reason.startswith("terms differ: "), reason


def test_question_words_read_as_their_slot() -> None:
    assert canonical("故宫在什么地方？") == canonical("故宫在何处？") == "故宫在哪里？"
    assert canonical("How often do you run?").lower() == "how many times do you run?"
    assert canonical("他会不会说日语？") == "他会说日语？"
    assert "公斤" in canonical("一千克黄金")
    assert zh_opposed("喜欢", "讨厌") and zh_opposed("最长", "最短") and not zh_opposed("本名", "真名")


@pytest.mark.parametrize(("a", "b"), [
    # wrong answers the rules gave on blind authors' pairs (train9, train10)
    ("How do I send money from the US to India?", "How do I send money from India to the US?"),
    ("What did I get Helen for Christmas?", "What did Helen get me for Christmas?"),
    ("How long is the flight from Paris to Rome?", "How long is the flight to Paris from Rome?"),
    ("Did they call us yesterday?", "Did we call them yesterday?"),
])
def test_a_place_gone_from_or_to_and_a_doer_or_receiver_are_roles(a: str, b: str) -> None:
    reason = different_question(a, b)
    assert reason is not None and reason.startswith("roles differ"), reason


@pytest.mark.parametrize(("a", "b"), [
    ("How do I get from the airport to downtown?", "What is the way to downtown from the airport?"),
    ("How do I send money to India from the US?", "How do I send money from the US to India?"),
    ("What did I buy for Helen?", "What did I get for Helen?"),
])
def test_the_same_roles_said_in_another_order_are_not_a_swap(a: str, b: str) -> None:
    reason = different_question(a, b)
    assert reason is None or not reason.startswith("roles differ: '"), reason


@pytest.mark.parametrize(("a", "b"), [
    ("上海到北京坐高铁要多久？", "请问从北京坐高铁去上海需要多长时间？"),
    ("杭州到上海开车要多久？", "从上海自驾到杭州需要多长时间？"),
])
def test_a_chinese_start_and_destination_swapped_are_roles(a: str, b: str) -> None:
    reason = different_question(a, b)
    assert reason is not None and reason.startswith("roles differ: '上海' is the "), reason


def test_the_same_start_and_destination_said_otherwise_are_one_question() -> None:
    assert different_question("北京到上海坐高铁要多久？", "从北京到上海坐高铁要多久？") is None


def test_a_country_written_in_capitals_keeps_its_role() -> None:
    """"US" is a name, not the pronoun "us": it is the start of one and the destination of
    the other."""
    reason = different_question("Which documents do I need to move from the US?",
                                "Which documents do I need to move to the US?")
    assert reason is not None and reason.startswith("roles differ"), reason
