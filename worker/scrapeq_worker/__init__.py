"""The scrapeq worker: claims queue rows, renders pages in headless Chromium, reports results."""
