"""The benches' realistic run (`BENCH_RUN=realistic`): an agno 3.1.10 RunOutput: a dozen messages with tool calls, metrics, tools,
nested data; printed as its to_dict() JSON.
Regenerate: python interop/make_realistic_run.py > interop/realistic_run.json"""
import json
from agno.models.message import Message
from agno.metrics import MessageMetrics, RunMetrics
from agno.run.agent import RunOutput, RunInput
from agno.run.base import RunStatus
from agno.models.response import ToolExecution

def metrics(i, o):
    m = MessageMetrics(input_tokens=i, output_tokens=o, total_tokens=i + o)
    return m

msgs = [
    Message(role="system", content="You are a travel assistant for Acme Corp. Answer with concrete options, prices and links. Use the tools to look up flights, hotels and the weather. Be concise; prefer bullet points; cite sources."),
    Message(role="user", content="I need to get from Berlin to Lisbon on March 14th, back on the 18th, and a hotel near Alfama under 150 EUR a night. What will the weather be like?"),
]
calls = [
    ("search_flights", {"origin": "BER", "destination": "LIS", "date": "2027-03-14", "return_date": "2027-03-18", "passengers": 1, "cabin": "economy"},
     {"flights": [{"carrier": "TAP", "flight": "TP535", "depart": "06:10", "arrive": "08:45", "price_eur": 142.5, "stops": 0},
                  {"carrier": "easyJet", "flight": "U25631", "depart": "11:20", "arrive": "13:55", "price_eur": 98.0, "stops": 0}]}),
    ("search_hotels", {"city": "Lisbon", "area": "Alfama", "check_in": "2027-03-14", "check_out": "2027-03-18", "max_price_eur": 150},
     {"hotels": [{"name": "Memmo Alfama", "price_eur": 139, "rating": 4.6, "distance_m": 120},
                 {"name": "Santiago de Alfama", "price_eur": 149, "rating": 4.8, "distance_m": 300}]}),
    ("get_weather", {"city": "Lisbon", "from": "2027-03-14", "to": "2027-03-18", "units": "metric"},
     {"daily": [{"date": f"2027-03-{d}", "min_c": 11 + d % 3, "max_c": 18 + d % 4, "rain_mm": (d * 7) % 5, "summary": "partly cloudy"} for d in range(14, 17)]}),
]
tools = []
for n, (name, args, result) in enumerate(calls):
    cid = f"call_{n}_a8f3c2e1d9"
    msgs.append(Message(role="assistant", content=None, tool_calls=[{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}], metrics=metrics(900 + 150 * n, 40 + n)))
    msgs.append(Message(role="tool", content=json.dumps(result), tool_call_id=cid, tool_name=name, tool_args=args))
    tools.append(ToolExecution(tool_call_id=cid, tool_name=name, tool_args=args, result=json.dumps(result)))
msgs.append(Message(role="assistant", content="Here is a plan for March 14-18:\n\n- **Flight**: easyJet U25631, 11:20 → 13:55, €98 (cheapest nonstop); TAP TP535 at 06:10 for €142.50 if you want the morning.\n- **Hotel**: Memmo Alfama, €139/night, rated 4.6, 120 m from the heart of Alfama.\n- **Weather**: 11-21 °C, partly cloudy, light rain possible on the 15th.\n\nTotal about €654 (≈ $706).", metrics=metrics(2100, 180)))
msgs.append(Message(role="user", content="Book the easyJet one and Memmo."))
msgs.append(Message(role="assistant", content="I can't book directly, but here are the links: https://www.easyjet.com/en/booking?flight=U25631&date=2027-03-14 and https://www.memmohotels.com/alfama/book?in=2027-03-14&out=2027-03-18", metrics=metrics(2400, 70)))
run = RunOutput(
    run_id="RUN_ID", agent_id="travel-agent", agent_name="Travel Agent", session_id="bench", user_id="bench-user",
    input=RunInput(input_content="I need to get from Berlin to Lisbon on March 14th, back on the 18th, and a hotel near Alfama under 150 EUR a night. What will the weather be like?"),
    content=msgs[-1].content, content_type="str", model="gpt-4o", model_provider="OpenAI",
    messages=msgs, tools=tools, status=RunStatus.completed, created_at=1_700_000_000,
    metadata={"tenant": "acme", "trace_id": "9f1c2b7e4a", "tags": ["travel", "booking"], "ab": {"variant": "B", "weight": 0.5}},
    session_state={"trip": {"from": "BER", "to": "LIS", "dates": ["2027-03-14", "2027-03-18"]}, "budget_eur": 700},
    followups=["Do you want a rental car?", "Should I add travel insurance?"],
    metrics=RunMetrics(input_tokens=8900, output_tokens=420, total_tokens=9320, duration=6.42, time_to_first_token=0.81),
)
d = run.to_dict()
print(json.dumps(d, ensure_ascii=False))
