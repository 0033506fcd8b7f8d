-- 0020: the claim's UPDATE of its chosen rows finds them by primary key whatever the statistics
-- say. It compared the status with `status = 'pending'`, which let the planner serve the look-up
-- from a partial index of pending rows; when the statistics said nearly none were pending (many
-- finished rows analyzed, then a burst of new ones before autovacuum's next ANALYZE), the plan
-- walked every pending row's entry of that index on each claim (docs/queue.md, "The claim").

\ir ../sql/claim.sql
