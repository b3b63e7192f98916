"""The lag proxy's parts. scripts/lagproxy.py is the entry point (it composes `Lag` from the
mixins here) and its docstring documents the rules. wire.py: a request as read and the
error answers of each wire; cbor.py; rules.py: rule names, merging, look-ups; state.py: the
windows and the call log; upstream.py: forwarding; throttle.py: throttle_rps; server.py: the
HTTP server and the /_lag/ control API; then one module per AWS service: sqs.py, eks.py,
iam.py (with the policy simulator), kms.py, events.py, ec2.py, cloudtrail.py, cloudwatch.py,
servicequotas.py."""
