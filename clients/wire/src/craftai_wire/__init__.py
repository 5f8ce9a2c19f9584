"""The wire between the craft-ai services and their clients, and nothing else.

`v1` holds the stubs generated from protos/craftai/v1 (tools/gen_protos.py), `vocabulary` the
names both sides use (error reasons, notice codes, features, engines, outputs and formats and
their proto enums), `metadata` the request metadata keys, `keys` the app-key format and the local
key's place, `details` the google.rpc status details that errors carry, `files` the one way a
small file another process reads is replaced. The services
(craftai_common) and the SDK (craftai) both import this package; it imports neither of them.
"""
