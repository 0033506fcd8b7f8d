"""The queue contract: the scraping_jobs table and every SQL statement that touches it."""
