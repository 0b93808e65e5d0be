"""Metrics of a running job: pure parsers (parse, csvmon), sources (log tail, NVML, psutil), the aggregator."""
