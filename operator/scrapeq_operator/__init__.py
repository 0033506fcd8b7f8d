"""The scrapeq operator: turns ScrapeJobs into queue rows, mirrors status, scales workers."""
