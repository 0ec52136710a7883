package io.laneway.lane.spring.cloud;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import io.laneway.lane.Lane;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.client.DefaultServiceInstance;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.loadbalancer.DefaultRequest;
import org.springframework.cloud.client.loadbalancer.DefaultRequestContext;
import org.springframework.cloud.client.loadbalancer.Request;
import org.springframework.cloud.client.loadbalancer.RequestData;
import org.springframework.cloud.client.loadbalancer.RequestDataContext;
import org.springframework.cloud.loadbalancer.core.ServiceInstanceListSupplier;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpMethod;
import org.springframework.util.LinkedMultiValueMap;
import reactor.core.publisher.Flux;

class LaneServiceInstanceListSupplierTest {
    private static final String KEY = "laneway.lanes";

    @AfterEach
    void clear() {
        Lane.set(null);
    }

    private static ServiceInstance instance(String id, String lanes) {
        Map<String, String> metadata = new HashMap<>();
        metadata.put("nacos.healthy", "true");
        if (lanes != null) {
            metadata.put(KEY, lanes);
        }
        return new DefaultServiceInstance(id, "order-service", "198.18.0." + id.length(), 8080, false, metadata);
    }

    private static final ServiceInstance BASE = instance("base", "baseline,dev-bob");
    private static final ServiceInstance ALICE = instance("alice", "dev-alice,feature-x");
    private static final ServiceInstance IDLE = instance("idle", "");
    private static final ServiceInstance NEW = instance("new", null);

    private static ServiceInstanceListSupplier fixed(List<ServiceInstance> instances) {
        return new ServiceInstanceListSupplier() {
            @Override
            public String getServiceId() {
                return "order-service";
            }

            @Override
            public Flux<List<ServiceInstance>> get() {
                return Flux.just(instances);
            }
        };
    }

    private static Request<RequestDataContext> request(String... headerPairs) {
        HttpHeaders headers = new HttpHeaders();
        for (int i = 0; i < headerPairs.length; i += 2) {
            headers.add(headerPairs[i], headerPairs[i + 1]);
        }
        RequestData data = new RequestData(HttpMethod.GET, URI.create("http://order-service/hop"), headers,
                new LinkedMultiValueMap<>(), new HashMap<>());
        return new DefaultRequest<>(new RequestDataContext(data));
    }

    private static List<String> ids(List<ServiceInstance> instances) {
        List<String> ids = new ArrayList<>();
        for (ServiceInstance i : instances) {
            ids.add(i.getInstanceId());
        }
        return ids;
    }

    private static List<String> chosen(ServiceInstanceListSupplier supplier, Request<?> request) {
        return ids(supplier.get(request).blockFirst());
    }

    private final LaneServiceInstanceListSupplier all =
            new LaneServiceInstanceListSupplier(fixed(List.of(BASE, ALICE, IDLE, NEW)));

    @Test
    void theLaneHeaderPicksTheInstancesListingThatLane() {
        assertEquals(List.of("alice"), chosen(all, request("x-lane", "dev-alice")));
        assertEquals(List.of("alice"), chosen(all, request("X-Lane", "feature-x")));
        assertEquals(List.of("base"), chosen(all, request("x-lane", "dev-bob")));
    }

    @Test
    void noLaneIsBaseline() {
        assertEquals(List.of("base"), chosen(all, request()));
        assertEquals(List.of("base"), ids(all.get().blockFirst()));
    }

    @Test
    void theBaggageLaneMemberCountsWhenThereIsNoLaneHeader() {
        assertEquals(List.of("alice"), chosen(all, request("baggage", "userId=7, lane=dev-alice")));
        assertEquals(List.of("alice"), chosen(all, request("baggage", "userId=7", "baggage", "lane=feature-x")));
        // the header wins over baggage
        assertEquals(List.of("base"), chosen(all, request("x-lane", "dev-bob", "baggage", "lane=dev-alice")));
    }

    @Test
    void withNothingOnTheRequestTheThreadsLaneCounts() {
        Lane.set("dev-alice");
        assertEquals(List.of("alice"), chosen(all, request()));
        assertEquals(List.of("alice"), chosen(all, new DefaultRequest<>(new DefaultRequestContext())));
        assertEquals(List.of("alice"), chosen(all, null));
        assertEquals(List.of("alice"), ids(all.get().blockFirst()));
        // a lane on the request wins over the thread's
        assertEquals(List.of("base"), chosen(all, request("x-lane", "dev-bob")));
    }

    @Test
    void theThreadsLaneIsReadWhenTheListIsAskedForNotWhenItArrives() {
        Lane.set("dev-alice");
        Flux<List<ServiceInstance>> lists = all.get(request());
        Lane.set(null);
        assertEquals(List.of("alice"), ids(lists.blockFirst()));
    }

    @Test
    void anInvalidLaneIsIgnored() {
        assertEquals(List.of("base"), chosen(all, request("x-lane", "-bad-")));
        assertEquals(List.of("base"), chosen(all, request("x-lane", "dev alice")));
        assertEquals(List.of("alice"), chosen(all, request("x-lane", "a,b", "baggage", "lane=dev-alice")));
        assertEquals(List.of("base"), chosen(all, request("baggage", "lane=" + "x".repeat(64))));
        // surrounding spaces are not part of the value
        assertEquals(List.of("alice"), chosen(all, request("x-lane", " dev-alice ")));
    }

    @Test
    void aLaneNoInstanceListsGetsNoInstance() {
        assertEquals(List.of(), chosen(all, request("x-lane", "dev-carol")));
        // not a prefix or a substring match
        assertEquals(List.of(), chosen(all, request("x-lane", "dev")));
        assertEquals(List.of(), chosen(all, request("x-lane", "alice")));
    }

    @Test
    void aServiceWithNoMarkedInstancePassesUnchanged() {
        List<ServiceInstance> plain = List.of(instance("p1", null), instance("p2", null));
        LaneServiceInstanceListSupplier supplier = new LaneServiceInstanceListSupplier(fixed(plain));
        assertSame(plain, supplier.get(request("x-lane", "dev-alice")).blockFirst());
        assertSame(plain, supplier.get(request()).blockFirst());
    }

    @Test
    void unmarkedAndIdleInstancesOfAGovernedServiceAreLeftOut() {
        LaneServiceInstanceListSupplier supplier = new LaneServiceInstanceListSupplier(fixed(List.of(NEW, IDLE)));
        assertEquals(List.of(), chosen(supplier, request()));
        assertEquals(List.of(), chosen(supplier, request("x-lane", "dev-alice")));
    }

    @Test
    void anEmptyListStaysEmpty() {
        LaneServiceInstanceListSupplier supplier = new LaneServiceInstanceListSupplier(fixed(List.of()));
        assertEquals(List.of(), chosen(supplier, request("x-lane", "dev-alice")));
    }

    @Test
    void headerAndMetadataKeyAreConfigurable() {
        ServiceInstance a = new DefaultServiceInstance("a", "s", "h", 1, false, Map.of("lanes", "gray"));
        ServiceInstance b = new DefaultServiceInstance("b", "s", "h", 2, false, Map.of("lanes", "baseline"));
        LaneServiceInstanceListSupplier supplier =
                new LaneServiceInstanceListSupplier(fixed(List.of(a, b)), "x-env", "lanes");
        assertEquals(List.of("a"), chosen(supplier, request("x-env", "gray")));
        assertEquals(List.of("b"), chosen(supplier, request("x-lane", "gray")));
        assertThrows(IllegalArgumentException.class, () -> new LaneServiceInstanceListSupplier(fixed(List.of()), " ", "k"));
    }

    @Test
    void listEntriesMatchWhole() {
        assertTrue(LaneServiceInstanceListSupplier.lists("a,b,c", "b"));
        assertTrue(LaneServiceInstanceListSupplier.lists(" a , b ", "b"));
        assertTrue(LaneServiceInstanceListSupplier.lists("baseline", "baseline"));
        assertFalse(LaneServiceInstanceListSupplier.lists("ab,bc", "b"));
        assertFalse(LaneServiceInstanceListSupplier.lists("", "b"));
        assertFalse(LaneServiceInstanceListSupplier.lists(",,", "b"));
        assertFalse(LaneServiceInstanceListSupplier.lists(null, "b"));
    }
}
