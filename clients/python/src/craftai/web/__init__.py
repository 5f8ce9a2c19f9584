"""The web gateway: `craftai web` (alone, in front of services at CRAFTAI_ADDRESS) or beside the
services in `craftai serve --web`. Its dependencies are the `web` extra (pip install
'craftai[web]'): FastAPI and uvicorn. docs/WEB.md says what it serves.

Modules: app (build(): the routers of routes/ and the guards composed), routes/ (the endpoints),
callers (who calls), answers (JSON), events (server-sent events), models (request bodies), errors
(service errors and the gateway's refusals as HTTP answers), calls (cancelled when the client
leaves or the stop's grace ends), hosts (the Host check), keycheck (the key before the body),
uploads (bodies bounded; pictures from forms or raw bodies), connections (uvicorn's protocol,
bounded), settings (CRAFTAI_WEB_*), server (uvicorn), link (the page's address), static/ (the page).
"""
