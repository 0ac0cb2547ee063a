"""zeep, a library that takes a ``requests.Session``, given a source's session: the WSDL and
the SOAP call go through the guard, the retries and the source's cookies and headers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import zeep
import zeep.transports
from lxml import etree

from aggregator.config import HttpSettings, Secret, SourceConfig
from aggregator.core.errors import BlockedAddressError
from aggregator.demo.peers.http_faults import FaultApp
from aggregator.demo.peers.server import PeerServer, respond
from aggregator.net.client import HttpClient

TNS = "urn:test:echo"
WSDL = f"""<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://schemas.xmlsoap.org/wsdl/"
    xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:tns="{TNS}" targetNamespace="{TNS}">
  <types>
    <xsd:schema targetNamespace="{TNS}" elementFormDefault="qualified">
      <xsd:element name="Echo"><xsd:complexType><xsd:sequence>
        <xsd:element name="text" type="xsd:string"/>
      </xsd:sequence></xsd:complexType></xsd:element>
      <xsd:element name="EchoResponse"><xsd:complexType><xsd:sequence>
        <xsd:element name="seen" type="xsd:string"/>
      </xsd:sequence></xsd:complexType></xsd:element>
    </xsd:schema>
  </types>
  <message name="EchoIn"><part name="parameters" element="tns:Echo"/></message>
  <message name="EchoOut"><part name="parameters" element="tns:EchoResponse"/></message>
  <portType name="EchoPort">
    <operation name="Echo"><input message="tns:EchoIn"/><output message="tns:EchoOut"/></operation>
  </portType>
  <binding name="EchoBinding" type="tns:EchoPort">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="Echo">
      <soap:operation soapAction="{TNS}#Echo"/>
      <input><soap:body use="literal"/></input>
      <output><soap:body use="literal"/></output>
    </operation>
  </binding>
  <service name="EchoService">
    <port name="EchoPort" binding="tns:EchoBinding"><soap:address location="SOAP_URL"/></port>
  </service>
</definitions>
"""
SOAP = "http://schemas.xmlsoap.org/soap/envelope/"


class SoapApp(FaultApp):
    """The fault server plus a WSDL (which sets a cookie) and a SOAP endpoint that fails once
    with 503 and then answers with what it saw: the text, the cookie, the API key header."""

    soap_url = ""

    def _route_wsdl(self, env: dict[str, Any], sr: Any, *_: Any) -> list[bytes]:
        body = WSDL.replace("SOAP_URL", self.soap_url).encode()
        return respond(sr, 200, body, "text/xml", headers=[("Set-Cookie", "mdr=s1; Path=/")])

    def _route_soap(
        self, env: dict[str, Any], sr: Any, path: str, q: dict[str, str], count: int
    ) -> list[bytes]:
        if count == 1:
            return respond(sr, 503, b"busy")
        length = int(env.get("CONTENT_LENGTH") or 0)
        request = etree.fromstring(env["wsgi.input"].read(length))
        seen = {
            "text": request.findtext(f".//{{{TNS}}}text"),
            "cookie": env.get("HTTP_COOKIE", ""),
            "key": env.get("HTTP_X_API_KEY", ""),
        }
        envelope = (
            f'<s:Envelope xmlns:s="{SOAP}"><s:Body><EchoResponse xmlns="{TNS}">'
            f"<seen>{json.dumps(seen)}</seen></EchoResponse></s:Body></s:Envelope>"
        )
        return respond(sr, 200, envelope.encode(), "text/xml")


@pytest.fixture(scope="module")
def soap() -> Iterator[tuple[SoapApp, PeerServer]]:
    app = SoapApp()
    with PeerServer(app) as server:
        app.soap_url = server.url + "soap/echo"
        yield app, server


def test_zeep_through_a_source_session(soap: tuple[SoapApp, PeerServer]) -> None:
    app, server = soap
    sleeps: list[float] = []
    client = HttpClient(HttpSettings(allow_private=True, retries=2), sleep=sleeps.append)
    src = SourceConfig(
        name="mdr",
        type="oai-pmh",
        url=server.url,
        headers={"X-API-Key": Secret("MDR_KEY", "k-123")},
    )
    with client.session(src) as http:
        transport = zeep.transports.Transport(session=http.session)
        service = zeep.Client(server.url + "wsdl/echo", transport=transport).service
        seen = json.loads(service.Echo(text="hello"))
    assert seen == {"text": "hello", "cookie": "mdr=s1", "key": "k-123"}
    assert app.hits("/soap/echo") == 2  # the 503 was retried under zeep's post
    assert len(sleeps) == 1


def test_zeep_cannot_reach_a_guarded_address(soap: tuple[SoapApp, PeerServer]) -> None:
    app, server = soap
    client = HttpClient(HttpSettings(allow_private=False))
    with client.session() as http, pytest.raises(BlockedAddressError):
        zeep.Client(
            server.url + "wsdl/guarded", transport=zeep.transports.Transport(session=http.session)
        )
    assert app.hits("/wsdl/guarded") == 0
