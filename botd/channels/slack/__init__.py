"""Slack: slack-bolt and slack_sdk, imported only inside this package."""
