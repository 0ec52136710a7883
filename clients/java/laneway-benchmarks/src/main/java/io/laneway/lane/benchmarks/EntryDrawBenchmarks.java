package io.laneway.lane.benchmarks;

import java.util.List;
import java.util.Map;

import io.laneway.lane.EntryRules;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.Setup;

/**
 * The draw at an RPC entry with entry rules present: what the consumer filter adds to a call in
 * no lane made outside any request, once it has the provider application's rules.
 */
public class EntryDrawBenchmarks extends Measured {
    private EntryRules weighted;
    private EntryRules sticky;
    private EntryRules condition;
    private EntryRules.Call call;
    private int roll;

    @Setup
    public void setUp() {
        weighted = rules(Map.of("name", "gray", "weight", 10));
        sticky = rules(Map.of("name", "gray", "weight", 10, "sticky", Map.of("attachment", "user_id")));
        condition = rules(Map.of("name", "gray", "weight", 0,
                "conditions", List.of(Map.of("attachment", "user_id", "values", "1~100,vip-*"))));
        call = new EntryRules.Call() {
            @Override
            public String attachment(String key) {
                return "user_id".equals(key) ? "4711" : null;
            }
        };
    }

    private static EntryRules rules(Map<String, Object> lane) {
        return EntryRules.of(Map.of("key", "order-service", "lanes", List.of(lane)));
    }

    /** One lane, weight 10, drawn per call. */
    @Benchmark
    public String drawPerCall() {
        roll = (roll + 37) % 100;
        return weighted.draw(call, roll);
    }

    /** One lane, weight 10, drawn by the CRC-32 of the call's user_id. */
    @Benchmark
    public String drawSticky() {
        return sticky.draw(call, 0);
    }

    /** One lane entered by a condition on user_id (a range and a wildcard), which it does not meet. */
    @Benchmark
    public String drawCondition() {
        return condition.draw(call, 0);
    }
}
