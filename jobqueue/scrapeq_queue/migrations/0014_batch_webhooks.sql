-- 0014: a webhook may ask for an event per uploaded output batch (docs/webhooks.md, "Batch
-- events"). The outbox takes a third event type, Batch, and a batch's sequence number in its
-- key (0 for the phase events, which have one per job, phase and endpoint); a ScrapeJob's
-- output names the endpoints that asked (at most 5, as spec.webhooks), so the uploader records
-- a batch's events in the transaction that marks the batch uploaded.

ALTER TABLE scrapeq_webhook_events
    DROP CONSTRAINT scrapeq_webhook_events_event_type_check,
    ADD CONSTRAINT scrapeq_webhook_events_event_type_check
        CHECK (event_type IN ('Succeeded', 'Failed', 'Batch')),
    ADD COLUMN batch_sequence INTEGER NOT NULL DEFAULT 0 CHECK (batch_sequence >= 0),
    DROP CONSTRAINT scrapeq_webhook_events_owner_uid_event_type_url_key,
    ADD CONSTRAINT scrapeq_webhook_events_owner_uid_event_type_url_batch_key
        UNIQUE (owner_uid, event_type, url, batch_sequence);

COMMENT ON COLUMN scrapeq_webhook_events.event_type IS
    'Succeeded or Failed (the phase the ScrapeJob reached), or Batch (an output batch was uploaded).';
COMMENT ON COLUMN scrapeq_webhook_events.batch_sequence IS
    'The output batch a Batch event reports; 0 for the phase events.';

ALTER TABLE scrapeq_outputs
    ADD COLUMN batch_webhooks JSONB NOT NULL DEFAULT '[]'::jsonb
        CHECK (jsonb_typeof(batch_webhooks) = 'array' AND jsonb_array_length(batch_webhooks) <= 5);

COMMENT ON COLUMN scrapeq_outputs.batch_webhooks IS
    'The endpoints of spec.webhooks that asked for Batch events: [{url, secret_name, secret_key}].';
