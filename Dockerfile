# Antre: web dashboard and worker image (docker-compose.yml runs both from it).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The image runs the installed wheel (antre, antre_web with its templates/ and static/,
# antre_worker, antre_demo), not the source tree: no PYTHONPATH. Put your own app module in
# an image built FROM this one (pip install it, or set PYTHONPATH to where it lives).
WORKDIR /app
COPY . /app
RUN pip install ".[web,postgres]" \
    && useradd --create-home --uid 1000 antre
USER antre

EXPOSE 8000
CMD ["antre", "web", "antre_demo:app", "--host", "0.0.0.0", "--port", "8000"]
