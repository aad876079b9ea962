"""Decision traces after the run: the decisions table with outcomes and regret, the shadow KV's
accuracy and divergences, anomaly severity, the JSON lines and Perfetto exports, and the
Markdown summary for people and reflecting LLMs. Everything here reads records and tables."""
