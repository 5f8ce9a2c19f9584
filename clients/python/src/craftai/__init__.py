"""craft-ai services: the Python SDK.

    from craftai import AiClient
"""
