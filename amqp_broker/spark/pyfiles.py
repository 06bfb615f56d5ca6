"""Build the archive that a Spark cluster's executors import the connector from (`--py-files`).

    python -m amqp_broker.spark.pyfiles [dist/amqp_broker.zip]     # prints the path it wrote

Reader and writer classes are pickled by reference, so every executor must be able to import
`amqp_broker.spark` and what it needs beyond pyspark: pika and pamqp (both pure Python).  The
zip holds `amqp_broker/__init__.py`, the `amqp_broker/spark` package, `pika` and `pamqp`, taken
from the running interpreter; nothing of the broker itself (trio, msgspec, ...) is needed on executors.  Pass it as
`spark-submit --py-files dist/amqp_broker.zip ...` (Spark puts it first on the executors'
PYTHONPATH).  Pure standard library; no pyspark import.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

DEFAULT_PATH = Path("dist") / "amqp_broker.zip"


def _package_files(package_dir: Path, arc_root: Path):
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        yield path, arc_root / path.relative_to(package_dir)


def build(dest: Path | str = DEFAULT_PATH) -> Path:
    """Write the zip (replacing an old one) and return its path."""
    import pamqp
    import pika

    import amqp_broker

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    broker_dir = Path(amqp_broker.__file__).resolve().parent
    entries = [(broker_dir / "__init__.py", Path("amqp_broker/__init__.py")),
               *_package_files(broker_dir / "spark", Path("amqp_broker/spark")),
               *(entry for lib in (pika, pamqp)
                 for entry in _package_files(Path(lib.__file__).resolve().parent, Path(lib.__name__)))]
    tmp = dest.with_suffix(dest.suffix + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for source, name in entries:
            zf.write(source, name.as_posix())
    tmp.replace(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python -m amqp_broker.spark.pyfiles [dist/amqp_broker.zip]", file=sys.stderr)
        return 2
    print(build(args[0] if args else DEFAULT_PATH))
    return 0


if __name__ == "__main__":
    sys.exit(main())
