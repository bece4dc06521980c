"""The KServe v2 HTTP/REST front end and the Prometheus ``/metrics`` endpoint (off by default).

``edge-agent serve --http HOST:PORT`` (or ``[http] listen``) serves, on one port, Triton's REST
protocol with its binary tensor extension from the same data plane as the gRPC server, and
``/metrics`` in the Prometheus text format. Importing this package is light: the server and
the collector are in their own modules.
"""
