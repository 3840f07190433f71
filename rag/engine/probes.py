"""Off-topic probe sentences used to calibrate the chitchat gate for each model and corpus.

At build time each probe is embedded and its best similarity to any chunk recorded; a question is
chitchat only when it sits no closer to the corpus than these probes (plus a margin). Written here,
deliberately about everyday life, so any documentation corpus is far from them.
"""

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
