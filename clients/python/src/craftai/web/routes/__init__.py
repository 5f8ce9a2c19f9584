"""The gateway's endpoints, one router per family (build() in craftai.web.app composes them): status,
setup, matte (remove background), sessions (open, prompt, everything, close), page (the page, its
vocabulary, health). Each takes the caller as a dependency (craftai.web.callers.Caller) and can be
mounted alone."""

API = "/api/v1"
