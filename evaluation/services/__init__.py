"""Every write of the evaluation app goes through these modules; pages, commands and tasks import the one
they need: `golden` (sets, versions, drafts), `runs` (start, execute, cancel, retry, reap, baseline),
`scoring` (one question through the question service), `gates` (gate tables and the verdict), `reports`
(HTML reports) and `reindex` (the gated reindex, the release gate `EvaluationConfig.ready` installs)."""
