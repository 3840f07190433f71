"""Small talk (E7): greetings, thanks, insults and questions about the assistant itself, in Chinese and English.

These get the fixed chitchat reply before any retrieval. A message is small talk only when nothing is left
of it once its small-talk phrases and filler are taken out: 「你好，请问怎么设置雾？」 still asks about fog,
while 「你好」, 「谢谢你，辛苦啦」, "thanks a lot!" and "which model are you running on?" ask nothing about
the documentation. The vector-side gate (gate.py) catches the other off-topic questions (the weather,
a poem) by how far they sit from the corpus.
"""

from __future__ import annotations

import re

# Each pattern is one kind of phrase; together they cover a message only when it is all small talk.
_ZH = (
    # greetings and farewells
    r"(?:你们?|您)好(?:啊|呀|哇)?", r"(?:大家|各位)好", r"嗨", r"哈+喽", r"早上好", r"下午好", r"晚上好", r"晚安",
    r"早安?", r"再见", r"拜拜", r"回头见", r"在吗", r"在不在", r"有人吗",
    # how are you (the English list has it too)
    r"(?:你|您)?(?:最近|今天)?(?:过得)?(?:好吗|好不好|还好吗|怎么样|如何|忙吗|忙不忙)(?:呀|啊|呢)?", r"吃(?:饭)?了(?:吗|没)",
    # thanks and praise
    r"(?:非常|十分|太)?(?:感谢|谢谢|多谢|谢了|谢啦)(?:你|您)?(?:了|啦)?", r"辛苦(?:你|您)?(?:了|啦)?", r"(?:你|您)?辛苦了",
    r"(?:你|您)?(?:真|太|好)?(?:棒|厉害|牛|聪明)(?:了|啊|呀)?", r"好的", r"明白了", r"知道了", r"懂了", r"没问题",
    r"今天", r"好", r"嗯+", r"哦+", r"ok",
    # insults and complaints about the assistant
    r"(?:你|您)?(?:真|太|好)?(?:笨|蠢|傻|垃圾|没用|废物)(?:了|啊)?", r"滚", r"闭嘴", r"(?:你|您)?(?:什么都不懂|啥也不懂)",
    # the assistant itself
    r"(?:你|您)是(?:谁|什么|哪位|什么人|机器人吗|人工智能吗|ai吗|真人吗)", r"(?:你|您)叫(?:什么名字|啥)",
    r"(?:你|您)(?:用|基于|跑在|运行在|使用)的?(?:是)?(?:什么|哪个|哪一个|哪种)(?:大)?模型(?:上)?",
    r"(?:你|您)是(?:什么|哪个|哪种)(?:大)?模型", r"(?:你|您)(?:能|会|可以)(?:做|干)(?:什么|啥)",
    r"介绍一下(?:你|您)自己", r"(?:你|您)(?:是|由)谁(?:开发|做|训练)的",
)
_EN = (
    r"(?:hi|hello|hey)(?: there| all| everyone)?", r"good (?:morning|afternoon|evening|night)", r"bye", r"goodbye",
    r"see you(?: later)?", r"(?:thank you|thanks|thx|ty)(?: (?:so|very) much| a lot)?(?: for (?:your|the) help)?",
    r"(?:you(?:'re| are) )?(?:great|awesome|amazing|the best|helpful)", r"(?:ok|okay|got it|cool|nice|great)",
    r"(?:you(?:'re| are) )?(?:stupid|useless|dumb|an idiot|terrible)", r"shut up",
    r"who are you", r"what are you", r"what(?:'s| is) your name", r"are you (?:a bot|an ai|human|a robot|chatgpt)",
    r"(?:which|what) (?:llm|ai|language model|model|gpt) (?:are you|do you use|are you using|(?:are you |do you )?run(?:ning)? on|powers you)",
    r"what can you do", r"introduce yourself", r"who (?:made|built|trained) you", r"how are you(?: doing)?",
)
_FILLER = r"[\s,，。.!！?？~～、…:：;；'\"“”‘’()（）\-]*"
_SMALLTALK_RE = re.compile(
    rf"^{_FILLER}(?:(?:{'|'.join(_ZH)}|\b(?:{'|'.join(_EN)})\b){_FILLER})+$", re.IGNORECASE)
_MAX_CHARS = 80


def is_smalltalk(question: str) -> bool:
    """Return whether a message is only greetings, thanks, insults or questions about the assistant."""
    text = " ".join(question.split())
    return bool(text) and len(text) <= _MAX_CHARS and _SMALLTALK_RE.match(text) is not None
