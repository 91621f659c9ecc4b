"""The console against a broker with ACL on: refused, the page asks for an access key; a wrong
secret is refused and changes nothing; the operator's key opens the page and signs what the
console does (a topic created, a test message sent through the SDK's producer), and signing out
closes it again."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import submit
from tests.interop.conftest import start_broker
from trocket.cli.defaults import TROCKET_DEFAULTS

ACL = """
accounts:
  - accessKey: operator-key
    secretKey: operator-secret
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


def test_with_acl_on_the_console_asks_for_an_access_key_and_uses_it(tmp_path, page):
    (tmp_path / "plain_acl.yml").write_text(ACL)
    plugins = ", ".join(f'"{name}"' for name in (*TROCKET_DEFAULTS.plugins, "acl", "console"))
    broker = start_broker(tmp_path, f"plugins = [{plugins}]", tables="[console]\nport = 0\n")
    try:
        url = next(
            line.split()[1] for line in broker.log.read_text().splitlines() if line.startswith("console: ")
        )
        page.goto(url)
        expect(page.locator("h1")).to_have_text("Access key needed")
        expect(page.locator("#refusal")).to_contain_text("NO_PERMISSION")

        submit(page, "sign-in", accessKey="operator-key", secretKey="not-the-secret")
        expect(page.locator("#error")).to_contain_text("Check signature failed for accessKey='operator-key'")
        expect(page.locator("#who")).to_have_text("")

        submit(page, "sign-in", secretKey="operator-secret")
        expect(page.locator("table#brokers")).to_contain_text("broker-a")
        expect(page.locator("#who")).to_contain_text("signed in as operator-key")

        page.goto(url + "#/topics")
        submit(page, "topic-create", topic="AclWeb")
        page.click("#confirm-ok")
        expect(page.locator("#answer")).to_contain_text("create topic AclWeb on broker-a")
        page.goto(url + "#/topic/AclWeb")
        submit(page, "send-message", body="signed by the operator's key")
        page.click("#confirm-ok")
        expect(page.locator("#answer")).to_contain_text("sendStatus: SEND_OK")  # the producer signs too

        page.click("#sign-out")
        expect(page.locator("h1")).to_have_text("Access key needed")
    finally:
        broker.stop()
