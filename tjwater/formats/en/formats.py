"""Date formats for the admin (FORMAT_MODULE_PATH): unambiguous ISO-like dates, and times always with
their time zone's name — an operator reading "14:48" must know it is UTC (or the deployment's zone)."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s T"
