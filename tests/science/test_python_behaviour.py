"""The science image behaves like CPython: its standard library, `__main__`, every advertised package,
and numpy and pandas results that come back as JSON."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import data_of, diagnostic
from tests.python_behaviour import (
    MAIN_MODULE,
    MAIN_MODULE_RESULT,
    STRPTIME,
    STRPTIME_RESULT,
    TRAILING_EXPRESSION_CASES,
    documented_missing,
    stdlib_missing,
)
from wasmexec import Limits, Sandbox

#: Every distribution `discovery.packages()` lists: one real operation with it, whose value is checked.
PACKAGE_OPERATIONS: dict[str, tuple[str, Any]] = {
    "attrs": ("import attrs\n@attrs.define\nclass P:\n    x: int\nr = P(3).x", 3),
    "beautifulsoup4": ("import bs4\nr = bs4.BeautifulSoup('<p>hi</p>', 'html.parser').p.text", "hi"),
    "charset-normalizer": ("import charset_normalizer\n"
                           "r = str(charset_normalizer.from_bytes(b'hello').best())", "hello"),
    "cloudpickle": ("import cloudpickle, pickle\nr = pickle.loads(cloudpickle.dumps(lambda v: v + 1))(1)", 2),
    "contourpy": ("import contourpy, numpy as np\nz = np.arange(16.0).reshape(4, 4)\n"
                  "r = len(contourpy.contour_generator(z=z).lines(5.5)) > 0", True),
    "cycler": ("import cycler\nr = len(list(cycler.cycler(color=['r', 'g'])))", 2),
    "defusedxml": ("import defusedxml.ElementTree as ET\nr = ET.fromstring('<a>1</a>').text", "1"),
    "et_xmlfile": ("import et_xmlfile, io\nfrom xml.etree.ElementTree import Element\nb = io.BytesIO()\n"
                   "with et_xmlfile.xmlfile(b) as xf:\n    xf.write(Element('a'))\nr = b.getvalue().decode()", "<a />"),
    "fonttools": ("from fontTools.misc.textTools import tostr\nr = tostr(b'abc')", "abc"),
    "formulaic": ("import formulaic, pandas as pd\n"
                  "m = formulaic.model_matrix('y ~ x', pd.DataFrame({'x': [1, 2], 'y': [3, 4]}))\n"
                  "r = list(m.rhs.columns)", ["Intercept", "x"]),
    "html5lib": ("import html5lib\nr = html5lib.parse('<p>x</p>', namespaceHTMLElements=False).find('.//p').text", "x"),
    "interface_meta": ("import interface_meta\nr = hasattr(interface_meta, 'InterfaceMeta')", True),
    "Jinja2": ("import jinja2\nr = jinja2.Template('{{ a }}!').render(a='hi')", "hi!"),
    "joblib": ("import joblib\nr = joblib.Parallel(n_jobs=1)(joblib.delayed(abs)(v) for v in (-1, -2))", [1, 2]),
    "kiwisolver": ("import kiwisolver as k\nx = k.Variable('x')\ns = k.Solver()\ns.addConstraint(x == 5)\n"
                   "s.updateVariables()\nr = x.value()", 5.0),
    "lxml": ("import lxml.etree\nr = lxml.etree.fromstring('<a><b>t</b></a>').findtext('b')", "t"),
    "MarkupSafe": ("import markupsafe\nr = str(markupsafe.escape('<b>'))", "&lt;b&gt;"),
    "matplotlib": ("import matplotlib.pyplot as plt, io\nfig, ax = plt.subplots()\nax.plot([1, 2])\nb = io.BytesIO()\n"
                   "fig.savefig(b, format='png')\nr = b.getvalue()[:4] == b'\\x89PNG'", True),
    "more-itertools": ("import more_itertools\nr = list(more_itertools.chunked([1, 2, 3], 2))", [[1, 2], [3]]),
    "mpmath": ("import mpmath\nmpmath.mp.dps = 20\nr = str(mpmath.sqrt(2))[:8]", "1.414213"),
    "narwhals": ("import narwhals as nw, pandas as pd\n"
                 "r = int(nw.from_native(pd.DataFrame({'a': [1, 2]}))['a'].sum())", 3),
    "networkx": ("import networkx as nx\nr = nx.shortest_path(nx.path_graph(4), 0, 3)", [0, 1, 2, 3]),
    "numpy": ("import numpy as np\nr = int(np.arange(10).sum())", 45),
    "openpyxl": ("import openpyxl\nwb = openpyxl.Workbook()\nwb.active['A1'] = 7\nr = wb.active['A1'].value", 7),
    "packaging": ("from packaging.version import Version\nr = Version('1.10') > Version('1.9')", True),
    "pandas": ("import pandas as pd\nr = int(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())", 6),
    "patsy": ("import patsy\nr = patsy.dmatrix('x', {'x': [1, 2]}).shape[1]", 2),
    "pillow": ("from PIL import Image\nr = list(Image.new('RGB', (3, 2)).size)", [3, 2]),
    "pyparsing": ("import pyparsing as pp\nr = pp.Word(pp.nums).parse_string('42')[0]", "42"),
    "pypdf": ("import pypdf, io\nw = pypdf.PdfWriter()\nw.add_blank_page(72, 72)\nb = io.BytesIO()\nw.write(b)\n"
              "r = len(pypdf.PdfReader(b).pages)", 1),
    "python-dateutil": ("from dateutil import parser\nr = parser.parse('2024-03-01T10:00').hour", 10),
    "PyYAML": ("import yaml\nr = yaml.safe_load('a: [1, 2]')", {"a": [1, 2]}),
    "regex": ("import regex\nr = regex.findall(r'\\p{L}+', 'héllo wörld')", ["héllo", "wörld"]),
    "reportlab": ("import io\nfrom reportlab.pdfgen import canvas\nb = io.BytesIO()\nc = canvas.Canvas(b)\n"
                  "c.drawString(10, 10, 'x')\nc.save()\nr = b.getvalue()[:4]", "b'%PDF'"),
    "scikit-learn": ("from sklearn.linear_model import LinearRegression\n"
                     "m = LinearRegression().fit([[0], [1], [2]], [1, 3, 5])\nr = round(float(m.coef_[0]), 6)", 2.0),
    "scipy": ("import scipy.stats\nr = round(float(scipy.stats.norm.cdf(0)), 6)", 0.5),
    "seaborn": ("import seaborn as sns, pandas as pd\n"
                "ax = sns.barplot(data=pd.DataFrame({'x': ['a', 'b'], 'y': [1, 2]}), "
                "x='x', y='y')\nr = len(ax.patches)", 2),
    "six": ("import six\nr = six.text_type('x')", "x"),
    "soupsieve": ("import bs4, soupsieve\nr = soupsieve.select_one('p.c', bs4.BeautifulSoup('<p class=c>y</p>', "
                  "'html.parser')).text", "y"),
    "statsmodels": ("import statsmodels.api as sm, numpy as np\nx = sm.add_constant(np.arange(10.0))\n"
                    "r = round(float(sm.OLS(2 * np.arange(10.0) + 1, x).fit().params[1]), 6)", 2.0),
    "sympy": ("import sympy\nx = sympy.Symbol('x')\nr = str(sympy.integrate(2 * x, x))", "x**2"),
    "tabulate": ("import tabulate\nr = tabulate.tabulate([[1, 2]], tablefmt='plain')", "1  2"),
    "threadpoolctl": ("import threadpoolctl\nr = isinstance(threadpoolctl.threadpool_info(), list)", True),
    "tomli_w": ("import tomli_w\nr = tomli_w.dumps({'a': 1})", "a = 1\n"),
    "toolz": ("import toolz\nr = toolz.pipe(3, lambda v: v + 1, lambda v: v * 2)", 8),
    "tqdm": ("import tqdm\nr = sum(tqdm.tqdm(range(4), disable=True))", 6),
    "typing_extensions": ("import typing_extensions\nr = typing_extensions.Literal['a'].__args__[0]", "a"),
    "tzdata": ("import zoneinfo\nr = zoneinfo.ZoneInfo('Europe/Paris').key", "Europe/Paris"),
    "webencodings": ("import webencodings\nr = webencodings.lookup('latin1').name", "windows-1252"),
    "wrapt": ("import wrapt\n@wrapt.decorator\ndef d(f, i, a, k):\n    return f(*a, **k) + 1\n"
              "@d\ndef g():\n    return 1\nr = g()", 2),
    "xlrd": ("import xlrd\nr = isinstance(xlrd.__version__, str)", True),
    "xlsxwriter": ("import xlsxwriter, io\nb = io.BytesIO()\nw = xlsxwriter.Workbook(b)\n"
                   "w.add_worksheet().write(0, 0, 1)\n"
                   "w.close()\nr = b.getvalue()[:2]", "b'PK'"),
    "xmltodict": ("import xmltodict\nr = xmltodict.parse('<a><b>1</b></a>')['a']['b']", "1"),
}  # fmt: skip


def test_every_stdlib_module_imports_but_the_documented_ones(science: Sandbox) -> None:
    assert stdlib_missing(science) == documented_missing("Left out of the science image")


def test_every_advertised_package_imports_and_does_one_real_operation(science: Sandbox) -> None:
    names = "from codemode import discovery\nresult = [p['name'] for p in discovery.packages()]"
    listed = data_of(science.run_sync(names))
    assert sorted(listed) == sorted(PACKAGE_OPERATIONS)  # a new package needs an operation here
    code = "import traceback\nresult = {}\n"
    for name, (operation, _) in PACKAGE_OPERATIONS.items():
        body = "\n".join("    " + line for line in operation.splitlines())
        code += (
            f"try:\n{body}\n    result[{name!r}] = r if isinstance(r, (int, float, str, list, dict)) else repr(r)\n"
            f"except BaseException as exc:\n    result[{name!r}] = 'FAILED ' + traceback.format_exc()[-300:]\n"
        )
    with Sandbox(Limits(timeout_ms=300_000, memory_mb=2048), runtime=science.runtime, profile="science") as sandbox:
        outcome = data_of(sandbox.run_sync(code))
    expected = {name: value for name, (_, value) in PACKAGE_OPERATIONS.items()}
    wrong = {name: outcome.get(name) for name in expected if outcome.get(name) != expected[name]}
    assert wrong == {}


def test_the_code_runs_in_a_fresh_main_module(science: Sandbox) -> None:
    assert data_of(science.run_sync(MAIN_MODULE)) == MAIN_MODULE_RESULT


def test_datetime_and_time_strptime_work(science: Sandbox) -> None:
    assert data_of(science.run_sync(STRPTIME)) == STRPTIME_RESULT


@pytest.mark.parametrize("module", ["bz2", "lzma"])
def test_bz2_and_lzma_compress(science: Sandbox, module: str) -> None:
    code = f"import {module}\nresult = {module}.decompress({module}.compress(b'x' * 100)) == b'x' * 100"
    assert data_of(science.run_sync(code)) is True


def test_sqlite3_works_in_memory_and_on_a_workspace_file(science: Sandbox) -> None:
    code = (
        "import sqlite3\n"
        "memory = sqlite3.connect(':memory:').execute('select 6 * 7').fetchone()[0]\n"
        "db = sqlite3.connect('/workspace/data.db')\n"
        "db.execute('create table t (x)')\n"
        "db.execute('insert into t values (1)')\n"
        "db.commit()\n"
        "result = [memory, sqlite3.connect('/workspace/data.db').execute('select x from t').fetchone()[0]]\n"
    )
    result = science.run_sync(code)
    assert data_of(result) == [42, 1]
    assert any(artifact["path"].endswith("data.db") for artifact in result["artifacts"])


def test_subprocess_and_socket_import_and_fail_with_a_hint_when_used(science: Sandbox) -> None:
    result = science.run_sync("import subprocess\nsubprocess.run(['id'])")
    assert "process" in diagnostic(result, "UNCAUGHT_EXCEPTION")["hint"]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import numpy as np\nresult = np.array([1, 2, 3])", [1, 2, 3]),
        ("import numpy as np\nresult = np.arange(4).reshape(2, 2)", [[0, 1], [2, 3]]),
        ("import numpy as np\nresult = [np.int64(7), np.float32(0.5), np.bool_(True)]", [7, 0.5, True]),
        ("import numpy as np\nresult = {'mean': np.mean([1, 2, 3])}", {"mean": 2.0}),
        ("import pandas as pd\nresult = pd.Series([1, 2])", [1, 2]),
        ("import pandas as pd\nresult = pd.Series([1, 2], index=['a', 'b'])", {"a": 1, "b": 2}),
        ("import pandas as pd\nresult = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})",
         [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]),
        ("import pandas as pd\nresult = pd.DataFrame({'k': ['p', 'q', 'p'], 'v': [1, 2, 3]}).groupby('k').sum()",
         [{"k": "p", "v": 4}, {"k": "q", "v": 2}]),
        ("import pandas as pd\nresult = pd.DataFrame({'t': pd.to_datetime(['2024-01-02']), 'n': [None]})",
         [{"t": "2024-01-02T00:00:00", "n": None}]),
        ("import pandas as pd\nresult = pd.Index([3, 4])", [3, 4]),
    ],
)  # fmt: skip
def test_numpy_and_pandas_results_come_back_as_json(science: Sandbox, code: str, expected: Any) -> None:
    result = science.run_sync(code)
    assert data_of(result) == expected
    assert not [d for d in result["diagnostics"] if d["code"] == "RESULT_NOT_JSON"], result["diagnostics"]


def test_nan_in_numpy_results_is_handled_as_for_floats(science: Sandbox) -> None:
    result = science.run_sync("import numpy as np\nresult = np.array([1.0, np.nan])")
    assert data_of(result) == [1.0, "nan"]
    assert diagnostic(result, "RESULT_NOT_JSON")


def test_every_run_of_the_image_hashes_strings_alike(science: Sandbox) -> None:
    code = "import random\nresult = [hash('abc'), random.random()]"
    first, second = data_of(science.run_sync(code)), data_of(science.run_sync(code))
    assert first[0] == second[0] and first[1] != second[1]


def test_numpys_global_random_numbers_differ_between_runs(science: Sandbox) -> None:
    # The image reseeds numpy's global generator on each run's first turn, not from the snapshot's state.
    code = "import numpy as np\nresult = [int(np.random.randint(2**31 - 1)), float(np.random.rand())]"
    first, second = data_of(science.run_sync(code)), data_of(science.run_sync(code))
    assert first[0] != second[0] and first[1] != second[1]


def test_a_run_sees_no_trace_of_the_turn_that_started_it_or_of_the_images_warm_up(science: Sandbox) -> None:
    code = (
        "import gc, linecache, pandas as pd\n"
        "result = [sorted(linecache.cache), sorted(getattr(linecache, '_interactive_cache', {})),\n"
        "          len([o for o in gc.get_objects() if isinstance(o, (pd.DataFrame, pd.Series))])]"
    )
    assert data_of(science.run_sync(code)) == [["<sandbox>"], [], 0]


def test_the_value_is_result_else_the_trailing_expression_statement(science: Sandbox) -> None:
    values = {code: data_of(science.run_sync(code)) for code, _ in TRAILING_EXPRESSION_CASES}
    assert values == dict(TRAILING_EXPRESSION_CASES)
