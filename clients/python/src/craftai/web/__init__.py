"""The web gateway: `craftai web` (alone, in front of services at CRAFTAI_ADDRESS) or beside the
services in `craftai serve --web`. Its dependencies are the `web` extra (pip install
'craftai[web]'): FastAPI and uvicorn. docs/WEB.md says what it serves.

Modules: app (build(): the routers of routes/ composed), routes/ (the endpoints), callers (who
calls), answers (JSON), events (server-sent events), models (request bodies), errors (service
errors as HTTP answers), uploads (bounded bodies, pictures from forms or raw bodies), settings
(CRAFTAI_WEB_*), server (uvicorn, alone or beside the services), static/ (the page).
"""
