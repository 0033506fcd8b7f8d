-- 0017: rows of a ScrapeJob with an output are marked undelivered once per INSERT statement
-- instead of once per row (sql/output_rows.sql): the operator's enqueue and the expansion of a
-- source row mark their rows themselves, and the per-row trigger was a quarter of the time of
-- an expansion batch (docs/queue.md, "Source rows").

\ir ../sql/output_rows.sql
