-- 0007: the webhook outbox (docs/webhooks.md). When a ScrapeJob reaches a phase one of its
-- spec.webhooks asks for, the operator writes one event per webhook here before it shows the
-- phase in the ScrapeJob's status; one key per (job, event, endpoint), so writing again after a
-- restart adds nothing. The operator's delivery loop claims due events (SKIP LOCKED, with a
-- lease in next_attempt_at), posts them, and marks them delivered, due again later, or dead.
-- The signing key is not here: a row names the Secret and its key, read at each delivery.

CREATE TABLE scrapeq_webhook_events (
    id BIGSERIAL PRIMARY KEY,
    event_id UUID NOT NULL UNIQUE,
    owner_uid TEXT NOT NULL,
    owner_namespace TEXT NOT NULL,
    owner_name TEXT NOT NULL,
    event_type TEXT NOT NULL CHECK (event_type IN ('Succeeded', 'Failed')),
    url TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    secret_name TEXT NOT NULL CHECK (length(secret_name) BETWEEN 1 AND 253),
    secret_key TEXT NOT NULL CHECK (length(secret_key) BETWEEN 1 AND 253),
    data JSONB NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ,
    last_error TEXT CHECK (length(last_error) <= 1000),
    UNIQUE (owner_uid, event_type, url)
);

-- The delivery loop's claim reads only due pending events.
CREATE INDEX scrapeq_webhook_events_due ON scrapeq_webhook_events (next_attempt_at)
    WHERE status = 'pending';

COMMENT ON TABLE scrapeq_webhook_events IS
    'The webhook outbox: one CloudEvent per ScrapeJob, phase and endpoint, until it is delivered or dead.';
COMMENT ON COLUMN scrapeq_webhook_events.event_id IS 'The CloudEvents id: the idempotency id a receiver deduplicates on.';
COMMENT ON COLUMN scrapeq_webhook_events.owner_uid IS 'The ScrapeJob''s metadata.uid.';
COMMENT ON COLUMN scrapeq_webhook_events.event_type IS 'The phase the ScrapeJob reached: Succeeded or Failed.';
COMMENT ON COLUMN scrapeq_webhook_events.url IS 'The endpoint (spec.webhooks[].url).';
COMMENT ON COLUMN scrapeq_webhook_events.secret_name IS 'The Secret, in owner_namespace, holding the signing key (never the key itself).';
COMMENT ON COLUMN scrapeq_webhook_events.secret_key IS 'The key of that Secret whose value is the signing key.';
COMMENT ON COLUMN scrapeq_webhook_events.data IS 'The CloudEvent''s data: namespace, name, uid, phase and row counts.';
COMMENT ON COLUMN scrapeq_webhook_events.status IS 'pending until the endpoint answered 2xx (delivered) or the operator gave up (dead).';
COMMENT ON COLUMN scrapeq_webhook_events.attempts IS 'How many times a delivery was started.';
COMMENT ON COLUMN scrapeq_webhook_events.next_attempt_at IS 'When the event is due; while a delivery runs, when its lease ends.';
COMMENT ON COLUMN scrapeq_webhook_events.created_at IS 'When the ScrapeJob reached the phase: the CloudEvents time.';
COMMENT ON COLUMN scrapeq_webhook_events.last_error IS 'Why the last attempt failed (never a key or a header value).';
