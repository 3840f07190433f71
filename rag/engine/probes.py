"""Sentences that are not about any documentation: the chitchat gate's two references (E7).

`PROBES` calibrate the gate against a corpus: at build time each is embedded and its best similarity to
any chunk recorded (the manifest's `offtopic_similarity`); a question far from the corpus is chitchat
only when it sits no closer to it than these probes, plus a margin.

`EXEMPLARS` recognise chitchat from the question itself: a question naming nothing that is closer to one of
them than to every chunk of the corpus is small talk. This is what keeps working on a corpus that itself
discusses chitchat (the bundled docs describe greetings and fixed replies, so the probes sit close to it).
They are embedded once per embedding model and process (gate.ExemplarVectors) and compared with the
question's vector the search already has. Written here, one or two of each kind: greetings, thanks and
farewells, questions about the assistant, and everyday small talk, in Chinese and English; none names
anything a documentation set would.
"""

def probe_language(text: str) -> str:
    """"zh" for a text with Chinese characters, else "en": the language a probe, or a question, is written in."""
    return "zh" if any("\u3400" <= ch <= "\u9fff" for ch in text) else "en"


def offtopic_similarity(manifest: dict, question: str) -> float | None:
    """How close off-topic probes in the question's language come to the corpus (the gate's calibration): a
    Chinese question over an English reference sits farther from every chunk than English small talk does, so
    it is compared with the Chinese probes. Versions built before keep the one figure over all probes."""
    by_language = manifest.get("offtopic_similarity_by_language") or {}
    return by_language.get(probe_language(question), manifest.get("offtopic_similarity"))


def same_language(manifest: dict, question: str) -> bool:
    """Whether a question is written in the corpus's language (True for versions that do not record it)."""
    return manifest.get("language", probe_language(question)) == probe_language(question)


def language_gap(manifest: dict, question: str) -> float:
    """How much nearer the corpus the probes of its own language come than those of the question's (0 when the
    question is in the corpus's language, or for versions built before the figures were kept)."""
    by_language = manifest.get("offtopic_similarity_by_language") or {}
    own, asked = manifest.get("language"), probe_language(question)
    if own == asked or own not in by_language or asked not in by_language:
        return 0.0
    return max(0.0, by_language[own] - by_language[asked])


PROBES = (
    "你好，最近过得怎么样？",
    "明天会不会下雨，要不要带外套？",
    "晚饭做什么菜比较好吃？",
    "推荐一本好看的小说吧",
    "帮我写一封请假的邮件",
    "昨晚的足球比赛谁赢了？",
    "怎样才能睡个好觉？",
    "这个周末去哪里玩比较好？",
    "股票明天会涨吗？",
    "讲一个有趣的小故事",
    "Hello, how are you today?",
    "What should I cook for dinner tonight?",
    "Tell me a funny story about a cat.",
    "Who won the football match yesterday?",
    "Recommend a good novel for the holidays.",
    "Write a birthday message for my friend.",
)

EXEMPLARS = (
    # greetings, thanks and farewells
    "你好呀", "早上好，今天心情不错", "谢谢你的帮助", "好的，再见",
    "Hi there!", "Thanks so much, that helped.", "Good night, talk to you tomorrow.",
    # the assistant itself
    "你是谁？你是机器人吗？", "你用的是哪个大模型？", "你能做些什么？",
    "Who are you and who built you?", "Which language model are you?", "Are you a real person?",
    # everyday small talk
    "今天天气怎么样？", "周末有什么好玩的地方推荐？", "晚饭吃什么好？", "讲个笑话给我听", "帮我写一首诗",
    "推荐一部好看的电影", "你觉得未来会怎样？", "我今天有点累，不想上班", "这只股票会涨吗？",
    "帮我翻译一句话", "你喜欢什么颜色？", "最近有什么新闻？",
    "What's the weather like today?", "Tell me a joke.", "Write me a short poem about the sea.",
    "Can you recommend a good movie?", "What should I eat for lunch?", "Where should I travel this summer?",
    "Do you think robots will replace us?", "I'm bored, let's chat.", "Who will win the next World Cup?",
)
