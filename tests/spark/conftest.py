"""Fixtures for the Spark pipeline tests: one local SparkSession per run, and a broker.

The broker is this project's `amqp-broker` started as a subprocess, or a real RabbitMQ when
SPARK_BROKER_URL is set (e.g. `bash .ci/rabbitmq.sh start` -> amqp://guest:guest@127.0.0.1:5673/).
Spark tests are skipped cleanly when pyspark or java is missing; the U tests need neither.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from compat_tests.support.launcher import launch_our_broker

from .amqp_util import Amqp

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.speculation": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.python.worker.reuse": "true",
}


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slow: long Spark tests (own JVMs), still run in CI")


def spark_available() -> str | None:
    """None when Spark can run here, else why not."""
    try:
        import pyspark  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as exc:
        return f"pyspark[sql] not installed ({exc})"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java not found"
    return None


def spark_env() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def launched_broker(tmp_path_factory):
    """Our `amqp-broker` process (management and metrics on), or None with SPARK_BROKER_URL."""
    if os.environ.get("SPARK_BROKER_URL"):
        yield None
        return
    broker = launch_our_broker(tmp_path_factory.mktemp("broker"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def broker_url(launched_broker) -> str:
    return launched_broker.url if launched_broker is not None else os.environ["SPARK_BROKER_URL"]


@pytest.fixture(scope="session")
def spark():
    reason = spark_available()
    if reason:
        pytest.skip(reason)
    spark_env()
    from pyspark.sql import SparkSession

    from amqp_broker.spark import register

    builder = SparkSession.builder.master("local[2]").appName("amqp-broker-spark-tests")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def amqp(broker_url):
    with Amqp(broker_url) as client:
        yield client
