"""Imports the stdlib during pre-initialization, so these modules exist at run time.

componentize-py snapshots the interpreter after the app module's top level ran;
a module not imported by then is not in the component at all.
"""

# ruff: noqa: F401
import abc
import argparse
import array
import ast
import asyncio
import base64
import binascii
import bisect
import builtins
import calendar
import cmath
import codecs
import collections
import collections.abc
import contextlib
import contextvars
import copy
import csv
import dataclasses
import datetime
import decimal
import difflib
import email
import email.message
import email.utils
import enum
import fnmatch
import fractions
import functools
import graphlib
import gzip
import hashlib
import heapq
import hmac
import html
import html.parser
import inspect
import io
import ipaddress
import itertools
import json
import keyword
import linecache
import locale
import math
import numbers
import operator
import os
import pathlib
import pprint
import pydoc
import queue
import random
import re
import secrets
import shlex
import statistics
import string
import struct
import sys
import textwrap
import time
import timeit
import tokenize
import tomllib
import traceback
import types
import typing
import unicodedata
import urllib.parse
import uuid
import warnings
import weakref
import xml.dom.minidom
import xml.etree.ElementTree
import zipfile
import zlib
import zoneinfo

# `site` does not run in the snapshot, so `help` is installed here (plain text, no pager);
# pydoc's Helper is what site's `_Helper` would call anyway.
builtins.help = pydoc.Helper(output=None)  # type: ignore[assignment]
pydoc.pager = pydoc.plainpager
