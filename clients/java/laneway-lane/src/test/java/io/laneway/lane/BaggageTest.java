package io.laneway.lane;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import org.junit.jupiter.api.Test;

class BaggageTest {
    @Test
    void findsTheLaneMember() {
        assertEquals("dev-alice", Baggage.lane("lane=dev-alice"));
    }

    @Test
    void toleratesOptionalWhitespaceAroundEverything() {
        assertEquals("dev-alice", Baggage.lane("  lane = dev-alice  "));
        assertEquals("dev-alice", Baggage.lane("user=42 ,\tlane\t=\tdev-alice\t, other=x"));
    }

    @Test
    void skipsOtherMembersAndProperties() {
        assertEquals("gray", Baggage.lane("userId=alice,serverNode=DF%2028,lane=gray;ttl=60;sampled,isProduction=false"));
        assertEquals("gray", Baggage.lane("lane=gray ; prop1 ; prop2 = v2"));
        assertEquals("gray", Baggage.lane("lanes=x,xlane=y,Lane=z,lane=gray"), "keys are exact and case-sensitive");
    }

    @Test
    void decodesPercentEncodedValues() {
        assertEquals("dev-alice", Baggage.lane("lane=dev%2Dalice"));
        assertEquals("dev-alice", Baggage.lane("lane=dev%2dalice"));
        assertEquals("a b,c", Baggage.find("k=a%20b%2Cc", "k"));
        assertEquals("caf\u00e9", Baggage.find("k=caf%C3%A9", "k"));
    }

    @Test
    void aValueThatIsNotAValidLaneIsIgnored() {
        assertNull(Baggage.lane("lane=dev%20alice"));
        assertNull(Baggage.lane("lane=-dev"));
        assertNull(Baggage.lane("lane=" + "x".repeat(64)));
        assertNull(Baggage.lane("lane=%3Cscript%3E"));
        assertNull(Baggage.lane("lane=caf%C3%A9"));
        assertNull(Baggage.lane("lane=dev/alice"));
        assertEquals("x".repeat(63), Baggage.lane("lane=" + "x".repeat(63)));
    }

    @Test
    void malformedMembersAreSkipped() {
        assertEquals("gray", Baggage.lane("lane,lane=gray"), "no '='");
        assertEquals("gray", Baggage.lane("lane=a\"b,lane=gray"), "quote is not a baggage octet");
        assertEquals("gray", Baggage.lane("lane=dev alice,lane=gray"), "inner space");
        assertEquals("gray", Baggage.lane("lane=dev%2,lane=gray"), "truncated percent-encoding");
        assertEquals("gray", Baggage.lane("lane=dev%zzx,lane=gray"), "bad percent-encoding");
        assertEquals("gray", Baggage.lane("lane=dev;=x,lane=gray"), "property without a key");
        assertEquals("gray", Baggage.lane("lane=dev;p=a b,lane=gray"), "property value with a space");
        assertEquals("gray", Baggage.lane("la ne=dev,lane=gray"), "key with a space");
        assertEquals("gray", Baggage.lane("=dev,lane=gray"), "empty key");
        assertEquals("gray", Baggage.lane("lane=dev\u00e9,lane=gray"), "non-ASCII");
    }

    @Test
    void theFirstWellFormedMemberDecides() {
        assertEquals("dev-alice", Baggage.lane("lane=dev-alice,lane=gray"));
        assertNull(Baggage.lane("lane=not%20valid,lane=gray"));
    }

    @Test
    void emptyAndAbsentMeanNoLane() {
        assertNull(Baggage.lane(null));
        assertNull(Baggage.lane(""));
        assertNull(Baggage.lane("   "));
        assertNull(Baggage.lane(",,,"));
        assertNull(Baggage.lane("lane="));
        assertNull(Baggage.lane("lane=   ;p"));
        assertNull(Baggage.lane("user=alice"));
        assertNull(Baggage.lane("lane=gray", ""));
        assertNull(Baggage.find("lane=gray", null));
    }

    @Test
    void theKeyIsConfigurable() {
        assertEquals("gray", Baggage.lane("lane=dev,traffic.lane=gray", "traffic.lane"));
    }

    @Test
    void aHugeHeaderIsParsedInLinearTime() {
        String huge = ",".repeat(200_000) + "lane=gray";
        long start = System.nanoTime();
        assertEquals("gray", Baggage.lane(huge));
        assertNull(Baggage.lane("a=b;".repeat(50_000)));
        long ms = (System.nanoTime() - start) / 1_000_000;
        assertEquals(true, ms < 2000, "took " + ms + " ms");
    }
}
