"""The read-only web console: jobs, a job's page with its live output, queues, clusters and regions, usage
(docs/how-to/console.md). Pages read what the ``zen`` read commands read (``zen.console.pages``); who sees
which jobs follows the queues' rules (``zen.console.viewers``)."""
